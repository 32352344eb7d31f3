# KL003: add-apt-repository refreshes the package lists itself (unless -n), so its RUN keeps them.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends software-properties-common \
    && rm -rf /var/lib/apt/lists/*
# expect: KL003
RUN add-apt-repository -y ppa:deadsnakes/ppa
RUN add-apt-repository -y -n ppa:ubuntu-toolchain-r/test
USER 1000:1000
