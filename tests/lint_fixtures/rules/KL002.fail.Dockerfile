# KL002: pip and uv write their download caches into layers of the final image (uv in copy mode:
# hard-linked, its cache costs little, see KL002-uv-hardlink.pass).
FROM python:3.11-slim-bookworm
# expect: KL002
RUN pip install numpy==2.1.0
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install scipy==1.14.1 \
# expect: KL002
    && uv pip install --system --link-mode copy scikit-learn==1.5.2
# a cache folder deleted before the install runs, or a different folder deleted: still in the layer
# expect: KL002
RUN rm -rf /tmp/uv-cache && UV_CACHE_DIR=/tmp/uv-cache UV_LINK_MODE=copy uv pip install --system pandas==2.2.3
# expect: KL002
RUN UV_CACHE_DIR=/tmp/uv-cache UV_LINK_MODE=copy uv pip install --system polars==1.9.0 && rm -rf /tmp/other
USER 1000:1000
