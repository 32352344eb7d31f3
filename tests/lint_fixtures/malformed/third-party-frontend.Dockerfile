# syntax = edrevo/dockerfile-plus
FROM python:3.11-slim
INCLUDE+ Dockerfile.common
RUN pip install --no-cache-dir numpy==2.1.0
