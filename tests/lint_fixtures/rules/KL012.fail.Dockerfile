# KL012: no PTX, so GPUs newer than 9.0 have no kernels.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
# expect: KL012
ENV TORCH_CUDA_ARCH_LIST="8.0 8.6 9.0"
USER 1000:1000
