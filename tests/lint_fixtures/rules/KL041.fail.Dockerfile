# KL041: a current Miniconda or Anaconda asks for Anaconda's Terms of Service; a docker build cannot answer.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*
RUN wget -q https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-x86_64.sh -O /tmp/mc.sh \
    && bash /tmp/mc.sh -b -p /opt/conda && rm /tmp/mc.sh
# expect: KL041
RUN /opt/conda/bin/conda install -y python=3.11 && /opt/conda/bin/conda clean -ya
USER 1000:1000

FROM continuumio/anaconda3:2025.06-0 AS image
# expect: KL041
RUN conda create -y -n app -c conda-forge python=3.11 numpy && conda clean -ya
USER 1000:1000
