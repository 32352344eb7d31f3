# KL016 passes: a pinned uv, a stage reference, and a bare name (a named build context of buildx).
FROM python:3.12-slim AS fetch
RUN echo hi > /hi.txt
FROM python:3.12-slim
COPY --from=ghcr.io/astral-sh/uv:0.9.5 /uv /uvx /bin/
COPY --from=fetch /hi.txt /hi.txt
COPY --from=models /weights /weights
USER 1000
