FROM ubuntu:24.04 AS tools
RUN apt-get update && apt-get install -y --no-install-recommends curl

FROM ubuntu:24.04
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt,sharing=locked \
    apt-get update && apt-get install -y --no-install-recommends ca-certificates
RUN apt-get update && apt-get install -y --no-install-recommends jq \
    && find /var/lib/apt/lists -type f -delete
COPY --from=tools /usr/bin/curl /usr/local/bin/curl
USER 1000:1000
