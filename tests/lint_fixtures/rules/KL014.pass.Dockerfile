FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
ENV FLASH_ATTN_CUDA_ARCHS=80;90
RUN export TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" && echo "$TORCH_CUDA_ARCH_LIST" > /arch.txt; echo done
USER 1000:1000
