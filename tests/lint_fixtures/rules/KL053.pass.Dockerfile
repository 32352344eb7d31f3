# KL053: the folder named in the destination, or a path the Dockerfile makes itself, is there
FROM python:3.11-slim AS builder
RUN mkdir -p /tmp/gdrcopy_libs && touch /tmp/gdrcopy_libs/libgdrapi.so
FROM python:3.11-slim
COPY TensorRT-8.4.1.5 /opt/TensorRT-8.4.1.5
ENV LD_LIBRARY_PATH=/opt/TensorRT-8.4.1.5/lib
COPY --from=builder /tmp/gdrcopy_libs /tmp/
RUN mkdir -p /tmp/gdrcopy_libs && mv /tmp/libgdrapi.so /tmp/gdrcopy_libs/
COPY models /srv/
WORKDIR /srv/models
RUN ls /srv/models/config
USER 1000:1000
