# KL045 stays quiet on arguments with a default, a `${NAME:-default}` in the FROM itself, BuildKit's
# automatic platform arguments (also through another ARG's default), a stage the final image
# does not need, and a template whose whole base is a declared argument (its tooling passes it).
ARG BASE_IMAGE=python:3.11-slim
ARG PARENT_IMAGE
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
FROM $PARENT_IMAGE AS template
RUN echo template > /template.txt
FROM ${RUNTIME:-python:3.11-slim}
COPY --from=base /built.txt /base.txt
COPY --from=template /template.txt /template.txt
COPY --from=build /built.txt /built.txt
USER 1000:1000
