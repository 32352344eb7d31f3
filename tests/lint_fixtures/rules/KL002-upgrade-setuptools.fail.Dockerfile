# KL002: with -U pip fetches the newest setuptools and keeps the wheel in its cache.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
# expect: KL002
RUN pip3 install -U setuptools
USER 1000:1000
