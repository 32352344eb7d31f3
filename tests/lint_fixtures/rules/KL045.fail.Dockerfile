# KL045: the base image comes from a build argument with no default: `docker build .` stops at FROM.
ARG BASE_IMAGE
ARG TAG
# expect: KL045
FROM ${BASE_IMAGE} AS deps
RUN echo deps > /deps.txt
# expect: KL045
FROM nvcr.io/nvidia/pytorch:${TAG}-py3
COPY --from=deps /deps.txt /deps.txt
USER 1000:1000
