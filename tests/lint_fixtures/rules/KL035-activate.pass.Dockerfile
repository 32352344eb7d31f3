# KL035 passes: the venv is activated in the RUN that uses it, and put on PATH for the rest.
FROM python:3.12-slim
RUN python -m venv /opt/venv
RUN . /opt/venv/bin/activate && pip install --no-cache-dir requests
ENV PATH=/opt/venv/bin:$PATH
USER 1000
