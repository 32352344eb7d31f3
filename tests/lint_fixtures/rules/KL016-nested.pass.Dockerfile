# KL016: ${A:+"${A}/"} expands to "" when A is empty and to "A/" otherwise; the image is tagged.
ARG REGISTRY=""
ARG CUDA=12.4.1
FROM ${REGISTRY:+"${REGISTRY}/"}nvidia/cuda:${CUDA}-runtime-ubuntu22.04
USER 1000:1000
