# KL023: an unpinned torch with a cu118 extra index comes from PyPI (a CUDA 12 build): the cu11x
# indexes end at torch 2.7 and pip takes the highest version from all indexes.
FROM nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL023
RUN pip install --no-cache-dir torch --extra-index-url https://download.pytorch.org/whl/cu118
USER 1000:1000
