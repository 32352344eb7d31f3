# KL008: kaolin's setup.py (like apex's) sets its own list when no GPU is visible: Pascal to Turing,
# without PTX, so Ampere and later GPUs get no kaolin kernels.
FROM nvidia/cuda:12.1.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.1.2 --index-url https://download.pytorch.org/whl/cu121
RUN git clone --branch v0.15.0 https://github.com/NVIDIAGameWorks/kaolin /kaolin
WORKDIR /kaolin
# expect: KL008
RUN FORCE_CUDA=1 MAX_JOBS=4 pip3 install --no-cache-dir --no-build-isolation .
USER 1000:1000
