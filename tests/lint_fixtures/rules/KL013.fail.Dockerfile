# KL013: replaces NVIDIA's torch build in the NGC image.
FROM nvcr.io/nvidia/pytorch:24.05-py3
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.cache/uv \
# expect: KL013
    pip install torch==2.5.1 torchvision==0.20.1 \
# expect: KL013
    && uv pip install --system torchaudio==2.5.1
USER 1000:1000
