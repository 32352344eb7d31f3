# KL016: an image named by COPY --from moves with its tag too (uv's binary here); a builder stage the
# final image is not built on is info.
# expect: KL016
FROM alpine:latest AS fetch
RUN echo hi > /hi.txt
FROM python:3.12-slim
# expect: KL016
COPY --from=ghcr.io/astral-sh/uv:latest /uv /uvx /bin/
COPY --from=fetch /hi.txt /hi.txt
# expect: KL016
RUN --mount=from=ghcr.io/astral-sh/uv,source=/uv,target=/bin/uv uv --version
USER 1000
