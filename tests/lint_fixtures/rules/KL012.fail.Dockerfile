# KL012: no PTX, and the list stops at 8.6 while the image's CUDA 12.4 compiles for 9.0: the
# extension built with it has no kernels for H100/H200.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124
# expect: KL012
ENV TORCH_CUDA_ARCH_LIST="8.0 8.6"
RUN FORCE_CUDA=1 MAX_JOBS=4 pip3 install --no-cache-dir --no-build-isolation torch-scatter==2.1.2
USER 1000:1000
