# KL055: `source`, `pushd` and `popd` are bash builtins; /bin/sh on Ubuntu and Debian is dash, so a
# RUN whose failure at them is not ignored fails the build.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/*
# expect: KL055
RUN python3 -m venv /opt/venv && source /opt/venv/bin/activate && pip install --no-cache-dir numpy==2.1.0
WORKDIR /src
# expect: KL055
RUN pushd /src && make && popd
USER 1000
