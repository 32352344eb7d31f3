# KL047 stays quiet when the file points the repositories at the archive first, and on supported
# releases.
FROM centos:7 AS build
RUN sed -i -e 's/mirrorlist/#mirrorlist/g' -e 's|#baseurl=http://mirror.centos.org|baseurl=http://vault.centos.org|g' \
        /etc/yum.repos.d/CentOS-* \
    && yum install -y gcc && yum clean all
RUN echo built > /built.txt
FROM debian:12-slim
COPY --from=build /built.txt /built.txt
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 && rm -rf /var/lib/apt/lists/*
FROM tensorflow/tensorflow:2.6.0-gpu AS tf
RUN apt-key adv --fetch-keys https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64/3bf863cc.pub \
    && apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
USER 1000:1000
