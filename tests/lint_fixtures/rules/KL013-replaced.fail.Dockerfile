# A bare name still replaces NVIDIA's build after -U, and for torchaudio, which the NGC image
# does not ship (it comes with its own torch pin).
FROM nvcr.io/nvidia/pytorch:24.05-py3
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL013
    pip install -U torchvision
RUN --mount=type=cache,target=/root/.cache/pip \
# expect: KL013
    pip install torchaudio
USER 1000:1000
