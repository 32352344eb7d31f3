# KL008: an image-wide `ENV FORCE_CUDA=1` does not show that a later, unnamed tree compiles CUDA
# code (mmdeploy's Jetson image sets it for mmcv, then installs its own pure-Python package): the
# finding is info and says so. Set in the build's own command, it is certain (KL008.fail).
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124
ENV FORCE_CUDA="1"
COPY pyproject.toml /src/
COPY mytool /src/mytool
WORKDIR /src
# expect: KL008
RUN pip3 install --no-cache-dir --no-deps .
USER 1000:1000
