FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL018
ENV TORCH_CUDA_ARCH_LIST="sm_80;sm_90"
# expect: KL018
RUN TORCH_CUDA_ARCH_LIST="8.0;9.0+ptx;" python3 -c "import os; print(os.environ['TORCH_CUDA_ARCH_LIST'])"
USER 1000:1000
