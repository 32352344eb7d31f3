# Rendered by torchkiln 0.1.0 for kiln-fixtures/tinyproj:latest. Do not edit: change kiln.toml and re-render.
# torch 2.13.0 · CPU only · Python 3.11 · base python:3.11-slim-bookworm
# GPU targets: none
# Build with BuildKit (`kiln build`, or DOCKER_BUILDKIT=1 docker build --target runtime .).

# base: the OS layer every stage shares; apt caches live in cache mounts, never in a layer
FROM python:3.11-slim-bookworm AS base
# the folders and files BuildKit mounts over in a RUN exist beforehand, at a fixed time, so no step's
# layer records when BuildKit created and removed them (render/reproducible.py)
ADD .kiln/mount-points.tar /
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1

# torch: a venv with torch and its dependencies only, pinned in a constraints file, in a layer of its own.
# Files are written once: uv unpacks the wheels into a cache in this step's own file system, hard-links
# them into the venv and the cache is removed (a cache mount would mean a second copy of 1-6 GB; this
# layer is rebuilt only when the base, Python or torch changes). Bytecode: unless [python] precompile
# says 'all', not every file is compiled (~5,000: 15 s, 100 MB); one import at build time writes the
# .pyc files of the modules it loads (torch, its companions and the modules [python] precompile lists).
# torch/test (the wheel's C++ test binaries, ~86 MB, loaded by no Python code) is removed
# Every file this step writes gets the time SOURCE_DATE_EPOCH (render/reproducible.py): the venv's files
# and .pyc come out identical, times included, from two builds with no shared cache
FROM base AS torch
ARG SOURCE_DATE_EPOCH=315532800
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/requirements-torch.txt,target=/kiln/requirements-torch.txt \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && /kiln/bin/uv venv --python python3.11 /opt/venv \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --require-hashes -r /kiln/requirements-torch.txt \
    && rm -rf /opt/venv/lib/python3.11/site-packages/torch/test \
    && mkdir -p /etc/pip \
    && /kiln/bin/uv pip freeze --python /opt/venv/bin/python > /etc/pip/constraint.txt \
    && rm -rf /tmp/kiln-uv-torch \
    && mkdir -p /root/.cache/uv \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run \
    && /opt/venv/bin/python -c 'import torch' \
    && rm -rf /tmp/torchinductor_* \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run

# project-deps: the project's dependencies from uv.lock (exactly the lock: one hashed package per step, without resolving); each step is a layer
# of the runtime (a package added at the end reuses the layers before it), then all of them at once
FROM torch AS project-deps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/project/000-numpy.txt,target=/kiln/project/000-numpy.txt \
    . /kiln/sources.sh \
    && touch /tmp/kiln-project-mark \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps --require-hashes -c /etc/pip/constraint.txt -r /kiln/project/000-numpy.txt
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/project/001-six.txt,target=/kiln/project/001-six.txt \
    . /kiln/sources.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps --require-hashes -c /etc/pip/constraint.txt -r /kiln/project/001-six.txt
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/project/requirements.txt,target=/kiln/project/requirements.txt \
    . /kiln/sources.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --require-hashes -c /etc/pip/constraint.txt -r /kiln/project/requirements.txt

# project-build: the project's own package built into a wheel (no build isolation: against the image's
# torch and the installed dependencies); only the wheel leaves this stage
FROM project-deps AS project-build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    . /kiln/sources.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python -c /etc/pip/constraint.txt hatchling
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/project-src,target=/kiln/project-src,rw \
    . /kiln/sources.sh \
    && /kiln/bin/uv build --wheel --no-build-isolation --python /opt/venv/bin/python --out-dir /opt/kiln-project /kiln/project-src \
    && ls /opt/kiln-project

# project-layer: the files the project's dependencies and package added, collected for the dev stage
FROM project-deps AS project-layer
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,from=project-build,source=/opt/kiln-project,target=/kiln/project-wheel \
    . /kiln/sources.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -c /etc/pip/constraint.txt /kiln/project-wheel/*.whl
RUN mkdir -p /opt/kiln-project-layer \
    && find /opt/venv -cnewer /tmp/kiln-project-mark ! -type d -printf '%P\n' | tar -C /opt/venv --no-recursion -T - -cf - | tar -C /opt/kiln-project-layer -xf -

# dev: the same Python environment plus compilers, ninja, ccache, git, uv and sudo (the user
# installs apt and pip packages with it), for building and interactive work
FROM torch AS dev
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential git ninja-build ccache sudo
COPY --from=project-layer /opt/kiln-project-layer/ /opt/venv/
COPY .kiln/bin/uv /usr/local/bin/uv
RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln \
    && echo 'kiln ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/kiln && chmod 0440 /etc/sudoers.d/kiln
ENV CCACHE_DIR="/home/kiln/.cache/ccache"
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    PIP_CONSTRAINT="/etc/pip/constraint.txt" \
    UV_CONSTRAINT="/etc/pip/constraint.txt"
LABEL org.opencontainers.image.title="kiln-fixtures/tinyproj" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.13.0" \
      io.torchkiln.variant="cpu" \
      io.torchkiln.python="3.11"
WORKDIR /workspace
USER 1000:1000
CMD ["tinyproj"]

# runtime: the torch and packages stages' layers as they are (not a copy of the venv: that would be a
# second 1-6 GB layer to write and export) + app; no compilers, no package caches, non-root by default
FROM project-deps AS runtime
ARG SOURCE_DATE_EPOCH=315532800
RUN touch /tmp/kiln-user-mark && useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln && mkdir -p /workspace \
    && find /etc /home /var /workspace -xdev -newer /tmp/kiln-user-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-user-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp
# the project's own package (tinyproj), built in project-build: one layer, the only one an edit of
# its code rebuilds
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,from=project-build,source=/opt/kiln-project,target=/kiln/project-wheel \
    . /kiln/sources.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -c /etc/pip/constraint.txt /kiln/project-wheel/*.whl
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    PIP_CONSTRAINT="/etc/pip/constraint.txt" \
    UV_CONSTRAINT="/etc/pip/constraint.txt"
LABEL org.opencontainers.image.title="kiln-fixtures/tinyproj" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.13.0" \
      io.torchkiln.variant="cpu" \
      io.torchkiln.python="3.11"
WORKDIR /workspace
USER 1000:1000
CMD ["tinyproj"]
