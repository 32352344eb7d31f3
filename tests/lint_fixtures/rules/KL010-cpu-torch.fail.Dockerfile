# KL010: apex's CUDA extension built against a CPU-only torch (+cpu): there is no CUDA to build with.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git \
    && rm -rf /var/lib/apt/lists/*
RUN pip --no-cache-dir install torch==2.5.1+cpu --index-url https://download.pytorch.org/whl/cpu
RUN git clone https://github.com/NVIDIA/apex /opt/apex \
    && cd /opt/apex \
    && git checkout 3c19f1061879394f28272a99a7ea26d58f72dace \
# expect: KL010
    && pip install --no-cache-dir --global-option="--cpp_ext" --global-option="--cuda_ext" ./
USER 1000:1000
