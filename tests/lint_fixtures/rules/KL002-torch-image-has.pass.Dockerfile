# KL002 stays quiet on a bare install of what the base image already has: NGC PyTorch ships torch,
# numpy and setuptools, so pip answers "Requirement already satisfied" and downloads nothing.
FROM nvcr.io/nvidia/pytorch:19.05-py3
RUN pip install numpy
RUN pip install setuptools torch
USER 1000:1000
