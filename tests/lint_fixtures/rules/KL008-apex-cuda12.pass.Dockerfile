# KL008: NVIDIA/apex's default branch (an unpinned clone) sets its own list per toolkit when no GPU is
# visible: 6.0-9.0 from CUDA 11.8, 7.0-12.0 from 12.8, 7.5-12.0 from 13.0: every GPU the toolkit targets.
# Transformer Engine sets NVTE_CUDA_ARCHS itself (70;80;89;90, plus 100;120 from CUDA 12.8).
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124
RUN git clone https://github.com/NVIDIA/apex /opt/apex
WORKDIR /opt/apex
RUN MAX_JOBS=4 pip install --no-cache-dir -v --no-build-isolation --config-settings "--build-option=--cuda_ext" ./
RUN MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation transformer-engine[pytorch]==2.5.0
USER 1000:1000
