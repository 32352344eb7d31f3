# KL002: with UV_LINK_MODE=copy uv copies out of its cache, which stays as a second copy: warning.
FROM python:3.11-slim
ENV UV_LINK_MODE=copy
RUN pip install --no-cache-dir uv==0.5.0
# expect: KL002
RUN uv pip install --system numpy
USER 1000:1000
