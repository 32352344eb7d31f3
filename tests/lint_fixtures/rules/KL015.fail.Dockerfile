FROM ubuntu:24.04
# expect: KL015
ADD https://developer.download.nvidia.com/compute/cuda/12.4.1/local_installers/cuda_12.4.1_550.54.15_linux.run /tmp/cuda.run
USER 1000:1000
