# KL049: `COPY dir /tmp/` puts the folder's contents in /tmp, not /tmp/dir, so removing /tmp/dir later
# deletes nothing the COPY added (llm-d's gdrcopy libraries)
FROM python:3.11-slim AS builder
RUN mkdir -p /tmp/gdrcopy_libs && touch /tmp/gdrcopy_libs/libgdrapi.so
FROM python:3.11-slim
COPY --from=builder /tmp/gdrcopy_libs /tmp/
RUN cp -a /tmp/libgdrapi.so /usr/lib/ && rm -rf /tmp/gdrcopy_libs
USER 1000:1000
