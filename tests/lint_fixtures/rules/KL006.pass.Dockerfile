# Secrets come in as BuildKit secret mounts; names that merely contain TOKEN are not secrets.
FROM python:3.11-slim-bookworm
ENV TOKENIZERS_PARALLELISM=false \
    HF_TOKEN_PATH=/run/secrets/hf_token \
    PIP_INDEX_URL=https://pkgs.example.com/simple
RUN --mount=type=secret,id=hf_token,env=HF_TOKEN \
    --mount=type=cache,target=/root/.cache/pip \
    pip install huggingface-hub==0.26.2 && python -c "import huggingface_hub"
USER 1000:1000
