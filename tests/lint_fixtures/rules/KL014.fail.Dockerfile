# KL014: the shell cuts the list at ';' and runs 9.0 as a command.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
# expect: KL014
RUN export TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX && echo "$TORCH_CUDA_ARCH_LIST" > /arch.txt
USER 1000:1000
