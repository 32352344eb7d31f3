FROM ubuntu:24.04
# expect: KL017
RUN apt-get update && apt-get install -y --no-install-recommends nvidia-docker2 && rm -rf /var/lib/apt/lists/*
USER 1000:1000
