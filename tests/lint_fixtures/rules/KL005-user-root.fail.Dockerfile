# KL005: the last USER of the final stage is root.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
RUN useradd --create-home --uid 1000 app
USER app
RUN id
# expect: KL005
USER root
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server"]
