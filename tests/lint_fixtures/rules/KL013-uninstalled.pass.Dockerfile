# The file removes NVIDIA's torch on purpose before installing the release it wants: a deliberate
# replacement, with no NGC build left to protect (and a constraints file would defeat it).
FROM nvcr.io/nvidia/pytorch:22.12-py3
RUN pip uninstall -y torch torchvision torchaudio
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -U torch==2.0.1 torchvision torchaudio --extra-index-url https://download.pytorch.org/whl/cu118
USER 1000:1000
