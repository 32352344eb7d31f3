# KL036: a continuation without && turns the second command into arguments of the first.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git \
    && pip install --no-cache-dir numpy \
# expect: KL036
    pip install --no-cache-dir requests \
    && rm -rf /var/lib/apt/lists/*
USER 1000:1000
