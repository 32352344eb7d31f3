# KL049 stays quiet when the files never reach an earlier layer, or are small: a download used and
# deleted in one RUN, a bind mount of the context, a requirements file read and deleted, a builder
# stage's files that the final image does not carry.
FROM python:3.11-slim AS builder
COPY . /src
RUN rm -rf /src/tests

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*
RUN wget -q https://example.com/tool-1.0.tar.gz -O /tmp/tool.tar.gz && tar -xzf /tmp/tool.tar.gz -C /opt && rm /tmp/tool.tar.gz
RUN --mount=type=bind,source=.,target=/tmp/src pip install --no-cache-dir /tmp/src
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY entrypoint /usr/local/bin/entrypoint
RUN rm -f /usr/local/bin/entrypoint.bak
USER 1000:1000
