# KL044: the two-part tags of the first CUDA 11 releases are gone; only 11.0.3 and 11.1.1 stayed.
# expect: KL044
FROM nvidia/cuda:11.1-runtime-ubuntu20.04
RUN echo ok
USER 1000:1000
