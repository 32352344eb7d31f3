# KL023: an unpinned torch with a PyTorch CUDA index as --extra-index-url: pip takes the highest version
# from PyPI and that index. The cu121 index ends at torch 2.5.1, PyPI has 2.14.1 for Ubuntu 22.04's
# Python 3.10, a CUDA 13.0 build: not the CUDA 12 torch the index was added for, nor the toolkit's.
FROM nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL023
RUN pip3 install --no-cache-dir torch torchvision --extra-index-url https://download.pytorch.org/whl/cu121
# the cu126 index has 2.14.1 too, and its local label (+cu126) sorts after PyPI's: the CUDA 12.6 build wins
RUN pip3 install --no-cache-dir torch --extra-index-url https://download.pytorch.org/whl/cu126
USER 1000:1000
