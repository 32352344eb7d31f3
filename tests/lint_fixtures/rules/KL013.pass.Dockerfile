# Other packages go in with NGC's constraints; torch itself is never reinstalled.
FROM nvcr.io/nvidia/pytorch:25.03-py3
ENV UV_CONSTRAINT=/etc/pip/constraint.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.cache/uv \
    pip install -c /etc/pip/constraint.txt transformers==4.46.3 torch \
    && uv pip install --system torchao==0.7.0
# uv sync that keeps the image's torch (--no-install-package takes a package name)
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --no-install-package torch --no-install-project
USER 1000:1000
