# KL024: the compat libcuda is registered for every process of the image.
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04
# expect: KL024
RUN ldconfig /usr/local/cuda-12.8/compat/
USER 1000:1000
