# KL045: the base image comes from a build argument with no default: `docker build .` stops at FROM.
ARG CUDA
ARG TAG
ARG BASE=${UNDECLARED_BASE}
# expect: KL045
FROM nvidia/cuda:${CUDA}-devel-ubuntu22.04 AS deps
RUN echo deps > /deps.txt
# a default that names an argument nobody declares is a mistake, not a parameter
# expect: KL045
FROM ${BASE} AS helper
RUN echo helper > /helper.txt
# expect: KL045
FROM nvcr.io/nvidia/pytorch:${TAG}-py3
COPY --from=deps /deps.txt /deps.txt
COPY --from=helper /helper.txt /helper.txt
USER 1000:1000
