# pip's general options may come before its command: `pip --no-cache-dir install torch` installs
# torch (and keeps no cache), so the extension built next has its torch.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4 FORCE_CUDA=1
RUN pip --no-cache-dir install torch==2.5.1
RUN pip --no-cache-dir install --no-build-isolation git+https://github.com/facebookresearch/pytorch3d@v0.7.8
USER 1000:1000
