# KL023: an unpinned torch from PyPI on a CUDA 11 toolkit: PyPI's torch for Python 3.8+ is a CUDA 12 or
# newer build, so extensions built with this nvcc are refused.
FROM nvidia/cuda:11.8.0-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL023
RUN pip3 install --no-cache-dir "torch>=2.0.0"
USER 1000:1000
