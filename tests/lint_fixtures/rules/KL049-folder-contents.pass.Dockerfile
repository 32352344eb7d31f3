# KL049: `COPY dir /tmp/` puts the folder's contents in /tmp, not /tmp/dir, so removing /tmp/dir later
# deletes nothing the COPY added (llm-d's gdrcopy libraries)
FROM python:3.11-slim AS builder
RUN mkdir -p /tmp/gdrcopy_libs && touch /tmp/gdrcopy_libs/libgdrapi.so
FROM python:3.11-slim
COPY --from=builder /tmp/gdrcopy_libs /tmp/
RUN if [ -d /tmp/gdrcopy_libs ]; then cp -a /tmp/gdrcopy_libs/* /usr/lib/ && rm -rf /tmp/gdrcopy_libs; fi
USER 1000:1000
