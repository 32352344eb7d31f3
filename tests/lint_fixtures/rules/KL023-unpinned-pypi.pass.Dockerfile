# KL023 stays quiet on an unpinned torch whose newest release matches the toolkit, or that it cannot place:
# Ubuntu 20.04's Python 3.8 gets torch 2.4.1 at most (CUDA 12.1) on a CUDA 12 toolkit; a pinned companion
# (torchvision==0.20.1) holds torch at its own release; an Ubuntu 18.04 Python (3.6: an old CUDA 10
# torch); an upper bound.
FROM nvidia/cuda:12.4.1-devel-ubuntu20.04 AS py38
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch
USER 1000:1000

FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS companion
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch torchvision==0.20.1
USER 1000:1000

FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS cuda13
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir --break-system-packages torch
USER 1000:1000

FROM nvidia/cuda:11.8.0-devel-ubuntu22.04 AS bounded
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir "torch>=1.13,<2.0"
USER 1000:1000
