# KL002: an install behind uv's global options is still an install (and copies out of the cache
# with --link-mode copy, so the cache is a second copy in the layer).
FROM python:3.11-slim
COPY --from=ghcr.io/astral-sh/uv:0.6.14 /uv /bin/
COPY requirements.txt /src/
# expect: KL002
RUN uv --managed-python pip install --system --link-mode copy -r /src/requirements.txt
USER 1000:1000
