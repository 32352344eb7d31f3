# KL031: a builder stage's conda root copied into the final image brings its package cache along.
FROM continuumio/miniconda3:24.9.2-0 AS build
# expect: KL031
RUN conda create -y -n app python=3.11 numpy

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
COPY --from=build /opt/conda /opt/conda
USER 1000:1000
