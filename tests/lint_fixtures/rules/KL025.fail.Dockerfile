# KL025: a kernel driver inside an image.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
# expect: KL025
RUN apt-get update && apt-get install -y --no-install-recommends nvidia-driver-550 \
    && rm -rf /var/lib/apt/lists/*
USER 1000:1000
