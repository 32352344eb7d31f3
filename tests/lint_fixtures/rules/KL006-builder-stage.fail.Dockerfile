# KL006: a token ARG in a stage the final image is not built on is not in the shipped image
# (runpod-workers/worker-comfyui's downloader stage): info, saying where it still is
FROM python:3.11-slim AS base
RUN mkdir /models
FROM base AS downloader
# expect: KL006
ARG HUGGINGFACE_ACCESS_TOKEN
RUN --mount=type=cache,target=/root/.cache/pip echo "${HUGGINGFACE_ACCESS_TOKEN:+token given}" > /models/note
FROM base AS final
COPY --from=downloader /models /models
USER 1000:1000
