# A bare torchvision (no version, no -U) on an NGC base is "Requirement already satisfied": pip
# keeps NVIDIA's build even with NGC's constraints switched off.
FROM nvcr.io/nvidia/pytorch:25.06-py3
RUN --mount=type=cache,target=/root/.cache/pip \
    unset PIP_CONSTRAINT && pip install einops torchvision transformers
USER 1000:1000
