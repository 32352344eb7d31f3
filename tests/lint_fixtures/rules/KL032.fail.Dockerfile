# KL032: downloads with TLS or signature checks turned off.
FROM python:3.11-slim
# expect: KL032
RUN apt-get update && apt-get install -y --allow-unauthenticated curl && rm -rf /var/lib/apt/lists/*
# expect: KL032
RUN curl -kfsSL https://example.com/tool.tar.gz -o /tmp/tool.tar.gz
# expect: KL032
RUN pip install --no-cache-dir --trusted-host pypi.org requests
# expect: KL032
RUN echo "deb [trusted=yes] https://developer.download.nvidia.com/devtools/repos/ubuntu2204/amd64/ /" > /etc/apt/sources.list.d/devtools.list
USER 1000:1000
