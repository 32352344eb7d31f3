# KL035: each RUN is its own shell; exported variables end with it.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
# expect: KL035
RUN export FORCE_CUDA=1
# expect: KL035
RUN CPATH=/usr/local/cuda/include && LD_LIBRARY_PATH=/usr/local/cuda/lib64
USER 1000:1000
