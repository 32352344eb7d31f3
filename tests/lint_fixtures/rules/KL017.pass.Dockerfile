FROM ubuntu:24.04
RUN apt-get update && apt-get install -y --no-install-recommends nvidia-container-toolkit && rm -rf /var/lib/apt/lists/*
USER 1000:1000
