# KL008: an apex pinned to a commit from before its per-toolkit list keeps the old default
# (Pascal to Turing, plus 8.0/8.6 on CUDA 11): Ada, Hopper and Blackwell get no apex kernels.
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124
RUN git clone https://github.com/NVIDIA/apex /opt/apex && cd /opt/apex \
    && git checkout 2386a912164b0c5cfcd8be7a2b890fbac5607c82 \
# expect: KL008
    && MAX_JOBS=4 pip install --no-cache-dir -v --no-build-isolation --config-settings "--build-option=--cuda_ext" ./
USER 1000:1000
