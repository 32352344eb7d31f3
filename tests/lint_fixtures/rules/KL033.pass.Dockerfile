# KL033: a build secret mounted for one RUN, and a public CA certificate, are fine.
FROM python:3.11-slim
COPY corp-ca.crt /usr/local/share/ca-certificates/corp-ca.crt
RUN --mount=type=secret,id=netrc,target=/root/.netrc pip install --no-cache-dir requests
USER 1000:1000
