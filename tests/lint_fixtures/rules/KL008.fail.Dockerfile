# KL008: apex (a release branch, older than its per-toolkit list) is compiled in `docker build`, where no
# GPU is visible and no arch list is set.
FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
ENV MAX_JOBS=4
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.5.1
RUN --mount=type=cache,target=/root/.cache/pip \
    git clone --depth 1 --branch 23.08 https://github.com/NVIDIA/apex /src/apex \
    && cd /src/apex \
# expect: KL008
    && APEX_CPP_EXT=1 APEX_CUDA_EXT=1 /opt/venv/bin/pip install --no-build-isolation .

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
