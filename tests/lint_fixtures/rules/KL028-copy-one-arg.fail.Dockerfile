# KL028: COPY with one argument has no destination; docker build stops ("requires at least two arguments").
FROM python:3.11-slim
WORKDIR /app
COPY Pipfile .
# expect: KL028
COPY Pipfile.lock
USER 1000:1000
