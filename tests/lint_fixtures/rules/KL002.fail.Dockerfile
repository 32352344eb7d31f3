# KL002: pip and uv write their download caches into layers of the final image.
FROM python:3.11-slim-bookworm
# expect: KL002
RUN pip install numpy==2.1.0
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install scipy==1.14.1 \
# expect: KL002
    && uv pip install --system rich==13.9.4
USER 1000:1000
