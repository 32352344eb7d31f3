# KL024 stays quiet when a later ENV puts the folder where the container runtime mounts the driver's
# libcuda in front of the compat folder: the host driver's library is found first.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
ENV LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/compat:${LD_LIBRARY_PATH}
ENV LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/:${LD_LIBRARY_PATH}
USER 1000:1000
