# The caches are cleaned in the RUN that fills them.
FROM nvidia/cuda:12.4.1-runtime-ubi9 AS rpm
RUN dnf install -y python3-pip && dnf clean all && rm -rf /var/cache/dnf

FROM alpine:3.20
RUN apk add --no-cache python3
USER 1000:1000
