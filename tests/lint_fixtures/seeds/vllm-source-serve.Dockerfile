# A serving image that builds vLLM from source in a builder stage.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip python3-venv git \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.5.1
# expect: KL014
RUN export TORCH_CUDA_ARCH_LIST=8.0;8.6;9.0 \
    && git clone --branch v0.6.4 https://github.com/vllm-project/vllm /src/vllm \
    && cd /src/vllm \
# expect: KL009, KL011
    && /opt/venv/bin/pip install -e .

# expect: KL005
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS runtime
# expect: KL003
RUN apt-get update && apt-get install -y --no-install-recommends python3 libgomp1
COPY --from=build /opt/venv /opt/venv
COPY --from=build /src/vllm /src/vllm
# expect: KL006
ENV HUGGING_FACE_HUB_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 \
    PATH=/opt/venv/bin:$PATH
RUN pip install prometheus-client==0.21.0
EXPOSE 8000
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]
