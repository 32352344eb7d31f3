# TORCH_CUDA_ARCH_LIST given to this very build marks the local project as a CUDA extension.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY kernels/ kernels/
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL010
    TORCH_CUDA_ARCH_LIST="9.0+PTX" MAX_JOBS=4 pip install --no-build-isolation ./kernels
USER 1000:1000
