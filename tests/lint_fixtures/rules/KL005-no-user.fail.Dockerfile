# KL005: no USER anywhere in the final stage's chain.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04 AS base
ENV LANG=C.UTF-8

# expect: KL005
FROM base AS runtime
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server"]
