# KL054: wheels installed from a bind mount, downloads removed in the RUN that uses them (or later,
# which KL049 reports), weights kept to be used, and wheels copied but never installed are not reported.
FROM python:3.11-slim AS build
RUN --mount=type=cache,target=/root/.cache/pip pip wheel --wheel-dir /wheels numpy==2.1.0

FROM python:3.11-slim AS project
WORKDIR /src
COPY pyproject.toml ./
RUN pip install --no-cache-dir poetry==1.8.3 && poetry build

FROM python:3.11-slim
# the project's own wheel (`poetry build`, no compiled code): a few hundred KB, not reported
COPY --from=project /src/dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels pip install --no-cache-dir /wheels/*.whl
RUN wget -q https://repo.anaconda.com/miniconda/Miniconda3-py311_24.7.1-0-Linux-x86_64.sh -O /tmp/miniconda.sh \
    && bash /tmp/miniconda.sh -b -p /opt/conda && rm /tmp/miniconda.sh
RUN wget -q https://example.org/models/model.safetensors -O /opt/model.safetensors
RUN --mount=type=cache,target=/downloads wget -q https://example.org/tool-1.2.tar.gz -O /downloads/tool.tar.gz \
    && tar -xzf /downloads/tool.tar.gz -C /usr/local
COPY --from=build /wheels /srv/wheelhouse
# a source archive (often a few MB of code) or a repository's setup .deb is not reported
RUN wget -q https://repo.radeon.com/amdgpu-install/6.3.4/ubuntu/jammy/amdgpu-install_6.3.60304-1_all.deb \
    && apt-get install -y ./amdgpu-install_6.3.60304-1_all.deb && rm -rf /var/lib/apt/lists/*
RUN wget -q https://github.com/example/tool/archive/refs/heads/main.zip && unzip main.zip
# a builder's folder installed as a source tree, not as files in it
COPY --from=build /src/app /opt/app
RUN pip install --no-cache-dir /opt/app
USER 1000
