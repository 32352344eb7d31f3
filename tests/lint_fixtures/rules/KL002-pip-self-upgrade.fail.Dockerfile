# KL002: pip upgrading itself keeps its own wheels (~3 MB) in the cache: small, so info (other small
# installs, such as `pip install ninja`, are not reported at all).
FROM python:3.11-slim
# expect: KL002
RUN pip install --upgrade pip setuptools wheel
RUN pip install ninja==1.11.1.1
USER 1000:1000
