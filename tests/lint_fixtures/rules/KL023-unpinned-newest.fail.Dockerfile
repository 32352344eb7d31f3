# KL023: an unpinned torch resolves to the newest release for the image's Python: on Ubuntu 24.04
# (Python 3.12) that is PyPI's CUDA 13 build (knowledge/torch.toml), which the CUDA 12.8 toolkit of
# the image cannot build extensions for.
FROM nvidia/cuda:12.8.1-devel-ubuntu24.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL023
RUN pip3 install --no-cache-dir --break-system-packages torch
USER 1000:1000
