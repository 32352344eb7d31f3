# KL010: building PyTorch itself from a checkout is not "an extension built before torch".
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip git && rm -rf /var/lib/apt/lists/*
RUN git clone --branch v2.5.1 --recursive https://github.com/pytorch/pytorch /opt/pytorch
WORKDIR /opt/pytorch
RUN pip install --no-cache-dir -r requirements.txt \
    && USE_CUDA=1 TORCH_CUDA_ARCH_LIST="8.7+PTX" MAX_JOBS=4 python3 setup.py bdist_wheel
USER 1000:1000
