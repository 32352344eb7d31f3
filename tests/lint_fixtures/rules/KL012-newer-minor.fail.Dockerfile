# KL012: sm_86 code runs on later 8.x GPUs (8.9), not on a new major generation (9.0), which the
# image's CUDA 11.8 can compile for.
FROM nvidia/cuda:11.8.0-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.1.2 --index-url https://download.pytorch.org/whl/cu118
# expect: KL012
ENV TORCH_CUDA_ARCH_LIST="8.6"
RUN FORCE_CUDA=1 MAX_JOBS=4 pip3 install --no-cache-dir --no-build-isolation torch-scatter==2.1.2
USER 1000:1000
