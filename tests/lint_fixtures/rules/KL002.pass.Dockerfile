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
# pip takes an unambiguous prefix (--no-cache is --no-cache-dir); uv takes --no-cache-dir as an alias
RUN pip install --no-cache httpx==0.27.2
RUN uv pip install --system --no-cache-dir anyio==4.6.2
# the cache is emptied later in the same RUN, by a glob or by the tool itself
RUN pip install idna==3.10 && rm -rf /root/.cache/pip/*
RUN pip install sniffio==1.3.1 && pip cache purge
USER 1000:1000
