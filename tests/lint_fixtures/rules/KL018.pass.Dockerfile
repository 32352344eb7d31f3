FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV TORCH_CUDA_ARCH_LIST="7.5 8.0 8.6 9.0a 12.0+PTX"
RUN TORCH_CUDA_ARCH_LIST="Ampere;Hopper" python3 -c "import os; print(os.environ['TORCH_CUDA_ARCH_LIST'])"
USER 1000:1000
