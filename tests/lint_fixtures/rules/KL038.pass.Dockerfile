# KL038: variables are expanded in ENV; a command runs in RUN.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ARG CONDA_DIR=/opt/conda
ENV CMAKE_PREFIX_PATH="${CONDA_DIR}"
RUN echo "prefix: $(dirname "$(command -v python)")"
USER 1000:1000
