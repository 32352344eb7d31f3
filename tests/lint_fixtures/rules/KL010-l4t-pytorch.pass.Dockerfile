# KL010 stays quiet on NVIDIA's Jetson PyTorch image: l4t-pytorch ships torch, so an extension built on it
# is built after torch.
FROM nvcr.io/nvidia/l4t-pytorch:r35.2.1-pth2.0-py3
ENV FORCE_CUDA="1" TORCH_CUDA_ARCH_LIST="7.2;8.7+PTX" MAX_JOBS=4
RUN git clone --depth 1 https://github.com/example/ops.git /opt/ops \
    && cd /opt/ops && pip install --no-cache-dir -e .
USER 1000:1000
