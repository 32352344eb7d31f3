# KL037: Ubuntu 22.04's python3 is 3.10, which the newest pip supports: `pip install -U pip` reaches
# pip 25.3 and later, which no longer has --global-option.
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0" MAX_JOBS=4
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m pip install --no-cache-dir -U pip
RUN python3 -m pip install --no-cache-dir torch==2.4.1
# expect: KL037
RUN python3 -m pip install --no-cache-dir --no-build-isolation --global-option="--cpp_ext" \
    git+https://github.com/example/ops@0123456789abcdef0123456789abcdef01234567
USER 1000:1000
