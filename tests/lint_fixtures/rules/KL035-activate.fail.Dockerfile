# KL035: activating a venv or conda env in a RUN of its own changes nothing for the next RUN.
FROM python:3.12-slim
RUN python -m venv /opt/venv
# expect: KL035
RUN . /opt/venv/bin/activate
RUN pip install --no-cache-dir requests
# expect: KL035
RUN conda activate base
USER 1000
