# KL002 stays quiet on uv without a cache mount: uv hard-links the installed files from its cache
# (its default link mode on Linux), so within one RUN the layer stores them once.
FROM python:3.11-slim
RUN pip install --no-cache-dir uv==0.5.0
RUN uv pip install --system numpy
USER 1000:1000
