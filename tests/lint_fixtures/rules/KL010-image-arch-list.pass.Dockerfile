# TORCH_CUDA_ARCH_LIST set image-wide (for kernels JIT-compiled at run time) does not make every
# local project a CUDA extension: this pure-Python package brings torch as its own dependency.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="10.0 12.0+PTX"
WORKDIR /src
COPY python/ python/
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -e "python[all]" --extra-index-url https://download.pytorch.org/whl/cu128
USER 1000:1000
