# pip's configuration turns the cache off for the later installs: `pip config set
# global.no-cache-dir` (any value) or a no-cache-dir line written into pip.conf.
FROM python:3.11-slim-bookworm AS base
RUN printf '[global]\nno-cache-dir = true\n' > /etc/pip.conf
RUN pip install rich==13.9.4

FROM base
RUN pip config set global.no-cache-dir false && pip install typer==0.15.1
RUN pip install httpx==0.27.2
USER 1000:1000
