# KL008: apex picks its own arch list without a GPU (6.0-7.5 before CUDA 11), which covers every GPU
# a CUDA 10 toolkit can target.
FROM pytorch/pytorch:1.6.0-cuda10.1-cudnn7-devel
RUN git clone https://github.com/NVIDIA/apex /opt/apex && cd /opt/apex \
    && git checkout 5633f6d && pip install --no-cache-dir -v --global-option="--cpp_ext" --global-option="--cuda_ext" ./
USER 1000:1000
