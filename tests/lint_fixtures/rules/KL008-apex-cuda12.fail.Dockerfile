# KL008: on CUDA 12, apex's own default list stops before Ada/Hopper/Blackwell and has no +PTX.
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124
RUN git clone https://github.com/NVIDIA/apex /opt/apex
WORKDIR /opt/apex
# expect: KL008
RUN MAX_JOBS=4 pip install --no-cache-dir -v --no-build-isolation --config-settings "--build-option=--cuda_ext" ./
USER 1000:1000
