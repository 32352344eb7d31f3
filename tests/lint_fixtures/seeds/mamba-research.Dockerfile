# A research image: extensions built before torch, an arch list torch rejects.
FROM nvidia/cuda:12.1.1-devel-ubuntu22.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
# expect: KL018
ENV TORCH_CUDA_ARCH_LIST="sm_80 sm_90" \
    MAX_JOBS=8
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv \
# expect: KL010
    && /opt/venv/bin/pip install --no-build-isolation causal-conv1d==1.4.0 \
# expect: KL010
    && /opt/venv/bin/pip install --no-build-isolation torch==2.4.1 mamba-ssm==2.2.2

FROM nvidia/cuda:12.1.1-runtime-ubuntu22.04
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
RUN useradd --create-home --uid 1000 app
USER app
CMD ["/opt/venv/bin/python", "-m", "research.generate"]
