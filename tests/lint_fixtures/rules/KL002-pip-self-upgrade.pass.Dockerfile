# KL002: pip upgrading itself keeps its own wheels (~3 MB) in the cache: a cache under 10 MB next to
# an image of GBs is not reported (knowledge/wheels.toml gives the sizes).
FROM python:3.11-slim
RUN pip install --upgrade pip setuptools wheel
USER 1000:1000
