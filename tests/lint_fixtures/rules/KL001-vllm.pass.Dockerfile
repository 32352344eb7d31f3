# KL001: vLLM (like SGLang) JIT-compiles FlashInfer and DeepGEMM kernels when a model first needs them,
# so a serving image that installs it keeps nvcc; a -runtime final stage would fail at that point.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/root/.cache/pip pip install vllm==0.10.1
USER 1000:1000
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--host", "0.0.0.0"]
