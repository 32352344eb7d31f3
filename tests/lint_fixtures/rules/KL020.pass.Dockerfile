FROM nvidia/cuda:12.8.1-devel-ubuntu24.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV FLASH_ATTN_CUDA_ARCHS="80;90" \
    MAX_JOBS=4 \
    FLASH_ATTENTION_FORCE_BUILD=TRUE
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.7.1 \
    && /opt/venv/bin/pip install --no-build-isolation flash-attn==2.8.3

# before 2.7 flash-attn has no FLASH_ATTN_CUDA_ARCHS at all
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS old
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV MAX_JOBS=4 FLASH_ATTENTION_FORCE_BUILD=TRUE
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.3.1 \
    && /opt/venv/bin/pip install --no-build-isolation flash-attn==2.6.3

FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
