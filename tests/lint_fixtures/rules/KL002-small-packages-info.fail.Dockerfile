# KL002: `pip3 install -U setuptools` does keep the setuptools wheel in pip's cache, but that is
# ~1.2 MB: a pip install of only small packages (pip, setuptools, wheel, ninja, ...: a few MB
# together) is reported at info with its size, not as a warning.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
# expect: KL002
RUN pip3 install -U setuptools
# expect: KL002
RUN pip3 install --upgrade pip wheel ninja packaging
USER 1000:1000
