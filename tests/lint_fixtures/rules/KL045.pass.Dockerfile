# KL045 stays quiet on arguments with a default, a `${NAME:-default}` in the FROM itself, BuildKit's
# automatic platform arguments, and a stage the final image does not need.
ARG BASE_IMAGE=python:3.11-slim
ARG OTHER
FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS build
RUN echo built > /built.txt
FROM ${OTHER} AS unused
RUN echo unused
FROM ${RUNTIME:-python:3.11-slim}
COPY --from=build /built.txt /built.txt
USER 1000:1000
