# KL043: COLABFOLD_VERSION is declared before FROM only, so inside the stage `${COLABFOLD_VERSION}`
# is empty and the pin is lost (the install takes whatever is newest).
ARG CUDA_VERSION=12.4.1
ARG COLABFOLD_VERSION=1.5.5
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL043
RUN pip3 install --no-cache-dir "colabfold[alphafold]==${COLABFOLD_VERSION}"
USER 1000:1000
