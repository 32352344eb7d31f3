# KL036: pip upgrading pip, or a package list that merely names a tool, is fine.
FROM python:3.11-slim
RUN pip install --no-cache-dir -U pip setuptools \
    && pip install --no-cache-dir numpy requests
RUN apt-get update && apt-get install -y --no-install-recommends git curl && rm -rf /var/lib/apt/lists/*
USER 1000:1000
