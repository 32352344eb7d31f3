# KL040: NVIDIA's CUDA images hold the toolkit but no Python, so pip and python are not found.
FROM nvidia/cuda:11.6.2-base-ubuntu20.04 AS app
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
# expect: KL040
RUN pip3 install --no-cache-dir torch==1.13.1
USER 1000:1000

FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
WORKDIR /src
COPY . .
# expect: KL040
RUN python3 setup.py bdist_wheel
