# KL023: a plain `pip install torch==1.13.0` is a CUDA 11.7 build, the toolkit here is CUDA 12.2.
FROM nvidia/cuda:12.2.2-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV PYTORCH_VERSION=1.13.0
# expect: KL023
RUN pip install --no-cache-dir torch==${PYTORCH_VERSION}
USER 1000:1000
