# KL002: Ubuntu's python3-pip depends on python3-setuptools and python3-wheel, so a bare
# `pip install setuptools wheel` (no -U) is "Requirement already satisfied": nothing is downloaded.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN pip3 install setuptools wheel
USER 1000:1000
