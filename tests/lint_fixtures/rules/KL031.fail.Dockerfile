# KL031: conda keeps package archives in pkgs/ unless cleaned in the same RUN.
FROM continuumio/miniconda3:24.9.2-0
# expect: KL031
RUN conda create -y -n app python=3.11 numpy
RUN conda clean -afy
USER 1000:1000
