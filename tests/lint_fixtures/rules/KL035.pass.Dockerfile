# KL035: ENV persists; an export used by a command in the same RUN is fine.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ENV FORCE_CUDA=1
RUN export MAX_JOBS=4 && echo "building with $MAX_JOBS jobs"
USER 1000:1000
