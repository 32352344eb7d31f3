# KL044: NVIDIA deleted the nvidia/cuda tags of end-of-life CUDA releases (July 2023): every 10.x tag
# and the early 11.x patches. FROM one of them fails with "not found".
ARG CUDA=11.3.0
# expect: KL044
FROM nvidia/cuda:10.1-cudnn7-devel-ubuntu18.04 AS old
RUN echo old > /old.txt
# expect: KL044
FROM nvidia/cuda:${CUDA}-cudnn8-runtime-ubuntu20.04
COPY --from=old /old.txt /old.txt
USER 1000:1000
