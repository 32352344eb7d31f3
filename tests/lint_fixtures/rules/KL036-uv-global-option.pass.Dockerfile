# KL036: options before uv's subcommand are uv's global options (`uv --managed-python pip install`),
# not a second command run together with the first.
FROM python:3.11-slim
COPY --from=ghcr.io/astral-sh/uv:0.6.14 /uv /bin/
COPY requirements.txt /src/
RUN uv --managed-python pip install --system --no-cache -r /src/requirements.txt
RUN uv -q --directory /src pip install --system --no-cache ruff
USER 1000:1000
