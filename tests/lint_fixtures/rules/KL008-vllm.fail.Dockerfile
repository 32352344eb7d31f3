# KL008 on a vLLM source build without TORCH_CUDA_ARCH_LIST: a warning, not an error. With no GPU
# visible torch's CMake builds for every common architecture of the toolkit, which vLLM filters to
# the ones it supports: the build works, for far more architectures than a fleet needs.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.5.1
ENV MAX_JOBS=8
RUN git clone --depth 1 --branch v0.6.4 https://github.com/vllm-project/vllm.git /opt/vllm
WORKDIR /opt/vllm
# expect: KL008
RUN pip3 install --no-cache-dir --no-build-isolation -e .
USER 1000:1000
