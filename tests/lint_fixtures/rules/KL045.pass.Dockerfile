# KL045 stays quiet on arguments with a default, a `${NAME:-default}` in the FROM itself, BuildKit's
# automatic platform arguments (also through another ARG's default), and a stage the final image
# does not need.
ARG BASE_IMAGE=python:3.11-slim
ARG OTHER
ARG FLAVOR=${TARGETARCH}
FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS build
RUN echo built > /built.txt
FROM ${OTHER} AS unused
RUN echo unused
FROM python:3.11-slim AS base-amd64
FROM python:3.11-slim AS base-arm64
FROM base-${FLAVOR} AS base
COPY --from=build /built.txt /built.txt
FROM ${RUNTIME:-python:3.11-slim}
COPY --from=base /built.txt /base.txt
COPY --from=build /built.txt /built.txt
USER 1000:1000
