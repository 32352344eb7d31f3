# A builder stage may keep caches (it never ships); the final stage uses mounts or --no-cache-dir.
FROM python:3.11-slim-bookworm AS wheels
RUN pip wheel --wheel-dir /wheels numpy==2.1.0

FROM python:3.11-slim-bookworm AS runtime
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl
RUN --mount=type=cache,target=/root/.cache/uv \
    uv pip install --system rich==13.9.4
ENV PIP_NO_CACHE_DIR=1
RUN pip install scipy==1.14.1
# a cache in the step's own file system, deleted before the step ends, never reaches the layer
RUN UV_CACHE_DIR=/tmp/uv-cache UV_LINK_MODE=hardlink uv pip install --system pandas==2.2.3 \
    && rm -rf /tmp/uv-cache
RUN pip install --cache-dir /tmp/pip-cache polars==1.9.0 && rm -rf /tmp/pip-cache/
USER 1000:1000
