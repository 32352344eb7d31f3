# KL043: the global ARG is declared again in the stage (it takes the global default), CUDA_VERSION
# is the base image's own ENV, and a variable the shell sets itself is the shell's.
ARG CUDA_VERSION=12.4.1
ARG COLABFOLD_VERSION=1.5.5
ARG APP_DIR=/app
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu22.04
ARG COLABFOLD_VERSION
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN echo "CUDA ${CUDA_VERSION}" && pip3 install --no-cache-dir "colabfold[alphafold]==${COLABFOLD_VERSION}"
RUN APP_DIR=/opt/app && mkdir -p "${APP_DIR}"
USER 1000:1000
