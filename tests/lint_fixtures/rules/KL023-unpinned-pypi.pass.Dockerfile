# KL023 stays quiet on an unpinned torch it cannot place: a CUDA 12 toolkit (PyPI's torch may be 12 or 13),
# an Ubuntu 18.04 Python (3.6: an old CUDA 10 torch), or an upper bound.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS cuda12
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch
USER 1000:1000

FROM nvidia/cuda:11.8.0-devel-ubuntu22.04 AS bounded
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir "torch>=1.13,<2.0"
USER 1000:1000
