# KL002: pip upgrading itself keeps its own wheels (~3 MB) in the cache: small, so info, and the
# message says it is pip's own upgrade.
FROM python:3.11-slim
# expect: KL002
RUN pip install --upgrade pip setuptools wheel
USER 1000:1000
