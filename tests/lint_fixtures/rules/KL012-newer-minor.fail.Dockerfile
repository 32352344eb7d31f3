# KL012: sm_86 code runs on later 8.x GPUs (8.9), not on a new major generation (9.0).
FROM nvidia/cuda:11.8.0-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL012
ENV TORCH_CUDA_ARCH_LIST="8.6"
USER 1000:1000
