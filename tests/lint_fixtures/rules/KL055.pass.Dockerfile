# KL055: the POSIX `.`, a failure the RUN goes on after (`;`), a bash -c, a SHELL of bash, and an
# image whose /bin/sh is bash (Rocky Linux) are not reported.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv && . /opt/venv/bin/activate && pip install --no-cache-dir numpy==2.1.0
RUN source /opt/venv/bin/activate; python3 -c "print(1)"
RUN bash -c "source /opt/venv/bin/activate && python3 -c 'print(2)'"
SHELL ["/bin/bash", "-c"]
RUN source /opt/venv/bin/activate && python3 -c "print(3)"

FROM rockylinux:9
RUN dnf install -y --setopt=install_weak_deps=False python3 && dnf clean all && rm -rf /var/cache/dnf
RUN pushd /tmp && python3 -c "print(4)" && popd
USER 1000
