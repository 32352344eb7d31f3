# The cache removed through the home folder in the same RUN: `~`, $HOME and ${HOME} are where pip
# and uv keep it, for root and for a non-root user alike.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
RUN pip install einops==0.8.0 && rm -rf ~/.cache/pip
RUN pip install rich==13.9.4 && rm -rf "$HOME/.cache"
RUN uv pip install --system tqdm==4.67.1 && rm -rf ${HOME}/.cache/uv/*
RUN useradd -m app
USER app
RUN pip install --user typer==0.15.1 && rm -rf ~/.cache/pip
