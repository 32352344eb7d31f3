# KL048 stays quiet when make has a job count: a number, $(nproc) or a variable.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
ARG MAX_JOBS=8
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN git clone --depth 1 -b v2.21.5-1 https://github.com/NVIDIA/nccl /opt/nccl \
    && cd /opt/nccl && make -j"$(nproc)" src.build && make -j 4 pkg.txz.build && make -j ${MAX_JOBS} -C ext
USER 1000:1000
