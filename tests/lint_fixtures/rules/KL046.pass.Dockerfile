# KL046 stays quiet on the versioned script for an old Python, on a Python the current script supports,
# and where the file does not show which Python runs it (a conda environment).
FROM ubuntu:20.04 AS old
RUN apt-get update && apt-get install -y --no-install-recommends curl python3 python3-distutils \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sS https://bootstrap.pypa.io/pip/3.8/get-pip.py | python3
FROM ubuntu:22.04
COPY --from=old /etc/hostname /tmp/hostname
RUN apt-get update && apt-get install -y --no-install-recommends curl python3 \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sS https://bootstrap.pypa.io/get-pip.py | python3
USER 1000:1000
