# KL010: the extension comes before torch, and torch is resolved in the same command.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV MAX_JOBS=4 \
    TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" \
    FLASH_ATTN_CUDA_ARCHS="80;90"
RUN python3 -m venv /opt/venv
# expect: KL010
RUN --mount=type=cache,target=/root/.cache/pip /opt/venv/bin/pip install --no-build-isolation causal-conv1d==1.5.0
# expect: KL010
RUN --mount=type=cache,target=/root/.cache/pip /opt/venv/bin/pip install --no-build-isolation torch==2.5.1 flash-attn==2.7.4.post1

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
