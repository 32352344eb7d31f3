# syntax=docker/dockerfile:1.7
FROM ubuntu:24.04
ADD --checksum=sha256:367d2299b3a4588ab487a6d27276ca5d9ead6e394904f18bccb9e12433b9c4fb https://developer.download.nvidia.com/compute/cuda/12.4.1/local_installers/cuda_12.4.1_550.54.15_linux.run /tmp/cuda.run
USER 1000:1000
