# KL031: `conda create -n env` with no packages makes an empty environment and downloads nothing;
# the install into it cleans up after itself.
FROM condaforge/miniforge3:24.9.2-0
RUN conda create -y -n app && \
    conda install -y -n app python=3.11 numpy && conda clean -afy
USER 1000:1000
