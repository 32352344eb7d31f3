# KL046: the current get-pip.py needs Python 3.9 (since pip 25.1); Ubuntu 18.04's python3 is 3.6 and
# an explicit python3.8 is 3.8, so both runs stop with "This script does not work on Python 3.x".
FROM nvidia/cuda:11.8.0-cudnn8-devel-ubuntu18.04 AS system
RUN apt-get update && apt-get install -y --no-install-recommends curl python3 python3-distutils \
    && rm -rf /var/lib/apt/lists/*
# expect: KL046
RUN curl -sS https://bootstrap.pypa.io/get-pip.py | python3
FROM ubuntu:20.04
RUN apt-get update && apt-get install -y --no-install-recommends wget python3.8 python3.8-distutils \
    && rm -rf /var/lib/apt/lists/*
COPY --from=system /etc/hostname /tmp/hostname
RUN wget -q https://bootstrap.pypa.io/get-pip.py \
# expect: KL046
    && python3.8 get-pip.py && rm get-pip.py
USER 1000:1000
