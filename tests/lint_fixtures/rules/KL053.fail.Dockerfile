# KL053: COPY of a folder puts its contents in the destination, not the folder: later steps that read
# DEST/FOLDER/... find nothing (PaddlePaddle/FastDeploy's TensorRT, llm-d's gdrcopy libraries)
FROM python:3.11-slim AS builder
RUN mkdir -p /tmp/gdrcopy_libs && touch /tmp/gdrcopy_libs/libgdrapi.so
FROM python:3.11-slim
# expect: KL053
COPY TensorRT-8.4.1.5 /opt/
# expect: KL053
COPY --from=builder /tmp/gdrcopy_libs /tmp/
RUN if [ -d /tmp/gdrcopy_libs ]; then cp -a /tmp/gdrcopy_libs/* /usr/lib/ && rm -rf /tmp/gdrcopy_libs; fi
ENV LD_LIBRARY_PATH=/opt/TensorRT-8.4.1.5/lib
USER 1000:1000
