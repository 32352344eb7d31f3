# KL038: variables are expanded in ENV; a command runs in RUN; a prompt's $(...) is expanded by
# bash each time it draws the prompt, so it is meant literally.
FROM pytorch/pytorch:2.1.2-cuda12.1-cudnn8-devel
ARG CONDA_DIR=/opt/conda
ENV CMAKE_PREFIX_PATH="${CONDA_DIR}"
ENV PS1='$(whoami)@\h:\w\$ '
RUN echo "prefix: $(dirname "$(command -v python)")"
USER 1000:1000
