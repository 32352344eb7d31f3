# KL040 stays quiet once something installs Python (or may have: a script, a copied interpreter).
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS apt
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir numpy==1.26.4
USER 1000:1000

FROM apt AS child
RUN python3 -c "import numpy"

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS scripted
COPY install_python.sh /tmp/
RUN bash /tmp/install_python.sh && pip3 install --no-cache-dir numpy==1.26.4

FROM python:3.11-slim AS py
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS copied
COPY --from=py /usr/local /usr/local
RUN python3 -m pip install --no-cache-dir numpy==1.26.4

FROM nvcr.io/nvidia/pytorch:24.05-py3 AS ngc
RUN pip install --no-cache-dir einops==0.8.0
USER 1000:1000
