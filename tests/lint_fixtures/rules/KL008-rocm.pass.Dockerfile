# KL008 passes: on a ROCm torch an extension is a HIP build, whose targets are PYTORCH_ROCM_ARCH's,
# not TORCH_CUDA_ARCH_LIST's (torch's hipify path reads no CUDA arch list).
FROM ubuntu:24.04
RUN apt-get update && apt-get install -y --no-install-recommends git python3-pip python3-venv && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir torch==2.7.1 --index-url https://download.pytorch.org/whl/rocm6.3
ENV PATH=/opt/venv/bin:$PATH
RUN git clone --depth 1 --branch v0.7.3 https://github.com/vllm-project/vllm.git /opt/vllm && cd /opt/vllm && MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation .
USER 1000
