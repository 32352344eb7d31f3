# KL047: CentOS 7 moved to vault.centos.org at its end of life (mirrorlist.centos.org no longer
# resolves), Debian 9 to archive.debian.org, and TensorFlow's GPU images from before April 2022 lack
# NVIDIA's new CUDA repository key: the first yum install / apt-get update fails.
FROM centos:7.8.2003 AS build
# expect: KL047
RUN yum install -y gcc make && yum clean all
RUN echo built > /built.txt
FROM python:3.6-stretch
COPY --from=build /built.txt /built.txt
# expect: KL047
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 && rm -rf /var/lib/apt/lists/*
FROM tensorflow/tensorflow:2.6.0-gpu AS tf
# a new list of another repository does not replace NVIDIA's key
RUN echo "deb http://example.org/debian bionic main" > /etc/apt/sources.list.d/example.list \
# expect: KL047
    && apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
USER 1000:1000
