# KL031: cleaned in the same RUN, or the pkgs folder is a cache mount.
FROM continuumio/miniconda3:24.9.2-0
RUN conda create -y -n app python=3.11 numpy && conda clean -afy
RUN --mount=type=cache,target=/opt/conda/pkgs conda install -y -n app scipy
USER 1000:1000
