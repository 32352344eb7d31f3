# KL012: a list that nothing in the image compiles with (prebuilt wheels only) changes nothing.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="8.0 8.6"
RUN pip3 install --no-cache-dir torch==2.5.1 xformers==0.0.28.post3 --index-url https://download.pytorch.org/whl/cu124
USER 1000:1000
