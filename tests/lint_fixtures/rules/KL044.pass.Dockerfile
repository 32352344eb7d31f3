# KL044 stays quiet on the patches NVIDIA kept (11.3.1, 11.8.0) and on current releases.
FROM nvidia/cuda:11.3.1-cudnn8-devel-ubuntu20.04 AS build
RUN echo built > /built.txt
FROM nvcr.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04
COPY --from=build /built.txt /built.txt
USER 1000:1000
