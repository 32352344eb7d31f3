# KL002: installing nvidia-pyindex writes a global pip configuration with no-cache-dir = true, so
# the pip installs after it keep no cache.
FROM python:3.10-slim
RUN pip install --no-cache-dir nvidia-pyindex
RUN pip install tritonclient[all] onnx
USER 1000:1000
