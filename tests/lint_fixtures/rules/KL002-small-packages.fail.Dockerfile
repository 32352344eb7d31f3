# KL002 weighs a cache by its size (knowledge/wheels.toml, PyPI's files): `pip3 install -U
# setuptools` keeps a ~1 MB wheel and pip, wheel, ninja and packaging ~3 MB together, not reported
# next to an image of GBs; uv's ~18 MB wheel is reported at info with its size; scipy's ~35 MB as a
# warning.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN pip3 install -U setuptools
RUN pip3 install --upgrade pip wheel ninja packaging
# expect: KL002
RUN pip3 install uv
# expect: KL002
RUN pip3 install scipy
USER 1000:1000
