# KL006: tokens and index credentials end up in the image config and history.
# expect: KL006
ARG HF_TOKEN
FROM python:3.11-slim-bookworm
# expect: KL006
ARG HF_TOKEN
# expect: KL006
ENV PIP_EXTRA_INDEX_URL=https://ci:s3cr3t-pass@pkgs.example.com/simple
# expect: KL006
ENV WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567
# expect: KL006
ENV HUB_CREDS=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789
RUN --mount=type=cache,target=/root/.cache/pip pip install huggingface-hub==0.26.2
USER 1000:1000
