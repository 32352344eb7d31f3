# KL041 stays quiet once the Terms of Service are accepted, the default channels are kept out, or the
# conda predates them.
FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS accepted
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*
RUN wget -q https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-x86_64.sh -O /tmp/mc.sh \
    && bash /tmp/mc.sh -b -p /opt/conda && rm /tmp/mc.sh \
    && /opt/conda/bin/conda tos accept --override-channels --channel https://repo.anaconda.com/pkgs/main \
    && /opt/conda/bin/conda tos accept --override-channels --channel https://repo.anaconda.com/pkgs/r
RUN /opt/conda/bin/conda install -y python=3.11 && /opt/conda/bin/conda clean -ya
USER 1000:1000

FROM continuumio/miniconda3:25.7.0-2 AS env
ENV CONDA_PLUGINS_AUTO_ACCEPT_TOS=yes
RUN conda install -y numpy && conda clean -ya
USER 1000:1000

FROM continuumio/miniconda3:25.7.0-2 AS forge
RUN conda install -y --override-channels -c conda-forge numpy && conda clean -ya
USER 1000:1000

FROM continuumio/miniconda3:4.12.0 AS old
RUN conda install -y numpy && conda clean -ya
USER 1000:1000

# the continuumio/miniconda3 image runs `conda tos accept` itself and removes the ToS plugin
# (anaconda/docker-images, miniconda3/debian/Dockerfile)
FROM continuumio/miniconda3:25.7.0-2 AS image
RUN conda create -y -n app python=3.11 numpy && conda clean -ya
USER 1000:1000
