# KL051: apt-get update cached in its own layer, the install in a later RUN reads its stale lists.
FROM ubuntu:22.04 AS base
# expect: KL003, KL051
RUN apt-get update
RUN apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
FROM base
# expect: KL003, KL051
RUN apt-get -qq update
RUN apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
USER 1000
