# KL049: files deleted in a later layer than the one that added them stay in the image.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04
WORKDIR /opt
RUN apt-get update && apt-get install -y --no-install-recommends wget git python3-pip && rm -rf /var/lib/apt/lists/*
RUN wget -q https://repo.anaconda.com/miniconda/Miniconda3-py311_24.7.1-0-Linux-x86_64.sh -O /tmp/miniconda.sh
# expect: KL049
RUN bash /tmp/miniconda.sh -b -p /opt/conda && rm /tmp/miniconda.sh
# expect: KL004
COPY . /tmp/src
# expect: KL049
RUN pip3 install --no-cache-dir /tmp/src && rm -rf /tmp/src
RUN git clone https://github.com/NVIDIA/apex.git
# expect: KL049
RUN rm -rf apex/.git
COPY --from=nvcr.io/nvidia/tritonserver:24.08-py3-sdk /workspace/install/python /tmp/client
# expect: KL049
RUN pip3 install --no-cache-dir /tmp/client/*.whl && rm -rf /tmp/client
USER 1000:1000
