# KL054: wheels a COPY brings to be installed, and installers or archives a RUN downloads and uses,
# stay in their layer when nothing removes them.
FROM python:3.11-slim AS build
RUN --mount=type=cache,target=/root/.cache/pip pip wheel --wheel-dir /wheels numpy==2.1.0

FROM python:3.11-slim
WORKDIR /opt
# expect: KL054
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl
# expect: KL054
RUN wget -q https://repo.anaconda.com/miniconda/Miniconda3-py311_24.7.1-0-Linux-x86_64.sh -O /tmp/miniconda.sh \
    && bash /tmp/miniconda.sh -b -p /opt/conda
# expect: KL054
RUN wget -q https://example.org/wheels/engine-1.2-cp311-cp311-linux_x86_64.whl \
    && pip install --no-cache-dir engine-1.2-cp311-cp311-linux_x86_64.whl
# a builder's folder of any name, installed as files (DEST/*): it holds the wheels
# expect: KL054
COPY --from=build /app/build /app/build
RUN pip install --no-cache-dir /app/build/*
USER 1000
