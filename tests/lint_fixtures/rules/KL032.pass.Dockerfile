# KL032: verified downloads.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL https://example.com/tool.tar.gz -o /tmp/tool.tar.gz
RUN pip install --no-cache-dir requests
USER 1000:1000
