# KL020: flash-attn ignores TORCH_CUDA_ARCH_LIST and compiles all its default architectures.
FROM nvidia/cuda:12.8.1-devel-ubuntu24.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" \
    MAX_JOBS=4 \
    FLASH_ATTENTION_FORCE_BUILD=TRUE
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.7.1 \
# expect: KL020
    && /opt/venv/bin/pip install --no-build-isolation flash-attn==2.8.3

FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
