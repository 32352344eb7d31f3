# KL007: a DeepSpeed training image compiles its ops with fast math.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" \
    MAX_JOBS=4 \
    DS_BUILD_FUSED_ADAM=1 \
# expect: KL007
    NVCC_APPEND_FLAGS="--use_fast_math"
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.5.1 \
    && /opt/venv/bin/pip install --no-build-isolation deepspeed==0.16.2

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
CMD ["/opt/venv/bin/deepspeed", "train.py"]
