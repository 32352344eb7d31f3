# KL003: the package lists stay in the layer of the install; a later rm does not shrink the image.
FROM ubuntu:24.04
# expect: KL003
RUN apt-get update && apt-get install -y --no-install-recommends git
RUN rm -rf /var/lib/apt/lists/*
USER 1000:1000
