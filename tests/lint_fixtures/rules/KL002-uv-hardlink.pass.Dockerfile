# KL002: uv hard-links installed files from its cache, so within one RUN the cache costs little: info.
FROM python:3.11-slim
RUN pip install --no-cache-dir uv==0.5.0
# expect: KL002
RUN uv pip install --system numpy
USER 1000:1000
