# KL048: `make -j` with no number (or followed by a target) runs every job at once.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN git clone --depth 1 -b v2.21.5-1 https://github.com/NVIDIA/nccl /opt/nccl \
# expect: KL048
    && cd /opt/nccl && make -j src.build
# expect: KL048
RUN cd /opt/nccl && make -j && make install
USER 1000:1000
