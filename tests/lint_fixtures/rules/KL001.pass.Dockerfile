# syntax=docker/dockerfile:1.7
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/venv && /opt/venv/bin/pip install numpy==2.1.0
CMD ["/opt/venv/bin/python", "-m", "uvicorn", "app:app"]

FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
USER 1000:1000
CMD ["/opt/venv/bin/python", "-c", "import numpy"]
