# KL003: the lists are removed, then add-apt-repository refreshes them again in the same RUN: the
# finding names that line.
FROM ubuntu:22.04
RUN apt-get update && apt-get install -y --no-install-recommends software-properties-common \
    && rm -rf /var/lib/apt/lists/* \
    # expect: KL003
    && add-apt-repository -y ppa:deadsnakes/ppa
USER 1000:1000
