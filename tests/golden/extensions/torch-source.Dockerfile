# Rendered by torchkiln 0.1.0 for acme/torch-src:latest. Do not edit: change kiln.toml and re-render.
# torch 2.7.1 · CUDA 12.8 (cu128) · Python 3.12 · base nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
# GPU targets: V100 (7.0), B200 (10.0) · TORCH_CUDA_ARCH_LIST=7.0;10.0+PTX
# Build with BuildKit (`kiln build`, or DOCKER_BUILDKIT=1 docker build --target runtime .).

# base: the OS layer every stage shares; apt caches live in cache mounts, never in a layer
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 AS base
# the folders and files BuildKit mounts over in a RUN exist beforehand, at a fixed time, so no step's
# layer records when BuildKit created and removed them (render/reproducible.py)
ADD .kiln/mount-points.tar /
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3.12

# torch-build: PyTorch v2.7.1 compiled from source the NGC way (pinned ref, TORCH_CUDA_ARCH_LIST from the
# targets, compressed fat binaries, CUDA/cuDNN/NCCL/distributed on, no tests, Ninja, ccache, MAX_JOBS from
# memory); only its wheel leaves this stage, and the torch stage installs nothing else from here
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 AS torch-build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG MAX_JOBS
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential ccache git python3.12 \
    && { [ -f "$(python3.12 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ] || apt-get install -y --no-install-recommends python3.12-dev; }
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/ext,target=/kiln/ext \
    --mount=type=cache,id=kiln-pip,target=/root/.cache/pip,sharing=locked \
    --mount=type=cache,id=kiln-ccache,target=/root/.cache/ccache \
    --mount=type=cache,id=kiln-wheel-cache,target=/kiln/wheel-cache,sharing=locked \
    . /kiln/sources.sh \
    && . /kiln/ext/build.sh \
    && /kiln/bin/uv venv --python python3.12 /opt/venv \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python cmake ninja pip setuptools wheel \
    && kiln_check_nvcc 12.8
ENV CUDA_HOME="/usr/local/cuda" \
    PATH=/usr/lib/ccache:/usr/local/cuda/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    TORCH_CUDA_ARCH_LIST="7.0;10.0+PTX" \
    TORCH_NVCC_FLAGS="-Xfatbin -compress-all" \
    CCACHE_DIR="/root/.cache/ccache" \
    CMAKE_GENERATOR="Ninja" \
    BUILD_TEST="0" \
    CMAKE_CUDA_COMPILER_LAUNCHER="ccache" \
    CMAKE_CXX_COMPILER_LAUNCHER="ccache" \
    CMAKE_C_COMPILER_LAUNCHER="ccache" \
    USE_CUDA="1" \
    USE_CUDNN="1" \
    USE_DISTRIBUTED="1" \
    USE_NCCL="1" \
    USE_SYSTEM_NCCL="1" \
    PYTORCH_BUILD_VERSION="2.7.1+cu128" \
    PYTORCH_BUILD_NUMBER="1"
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/ext,target=/kiln/ext \
    --mount=type=cache,id=kiln-pip,target=/root/.cache/pip,sharing=locked \
    --mount=type=cache,id=kiln-ccache,target=/root/.cache/ccache \
    --mount=type=cache,id=kiln-wheel-cache,target=/kiln/wheel-cache,sharing=locked \
    --mount=type=cache,id=kiln-torch-src,target=/kiln/torch-src,sharing=locked \
    . /kiln/sources.sh \
    && . /kiln/ext/build.sh \
    && export MAX_JOBS="${MAX_JOBS:-$(kiln_jobs 4)}" \
    && kiln_torch_wheel torch-2.7.1-cu128-py3.12-31375093c712 https://github.com/pytorch/pytorch v2.7.1 \
    && ls -l /opt/kiln-torch

# torch: a venv with torch and its dependencies only, pinned in a constraints file, in a layer of its own.
# Files are written once: uv unpacks the wheels into a cache in this step's own file system, hard-links
# them into the venv and the cache is removed (a cache mount would mean a second copy of 1-6 GB; this
# layer is rebuilt only when the base, Python or torch changes). Bytecode: unless [python] precompile
# says 'all', not every file is compiled (~5,000: 15 s, 100 MB); one import at build time writes the
# .pyc files of the modules it loads (torch, its companions and the modules [python] precompile lists).
# torch/test (the wheel's C++ test binaries, ~86 MB, loaded by no Python code) is removed
# torch's fat binaries keep only the device code of 7.0, 10.0 (kiln prune; [gpu] prune = false keeps them whole)
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
    --mount=type=bind,from=torch-build,source=/opt/kiln-torch,target=/kiln/torch-wheel \
    --mount=type=bind,source=.kiln/prune,target=/kiln/prune \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && /kiln/bin/uv venv --python python3.12 /opt/venv \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python /kiln/torch-wheel/torch-*.whl -r /kiln/requirements-torch.txt \
    && rm -rf /opt/venv/lib/python3.12/site-packages/torch/test \
    && /opt/venv/bin/python -B /kiln/prune/prune.py --targets 7.0,10.0 --ptx /opt/venv/lib/python3.12/site-packages/torch \
    && mkdir -p /etc/pip \
    && /kiln/bin/uv pip freeze --python /opt/venv/bin/python > /etc/pip/constraint.txt \
    && rm -rf /tmp/kiln-uv-torch \
    && mkdir -p /root/.cache/uv \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run \
    && /opt/venv/bin/python -c 'import torch' \
    && rm -rf /tmp/torchinductor_* \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run

# toolchain: the runtime's exact torch (same venv, same constraints file) plus a compiler:
# torch's CUDA 12.8 from the runtime base's devel sibling, g++, Ninja and ccache; used by the dev stage, never by the runtime
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 AS toolchain
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential ccache git python3.12 \
    && { [ -f "$(python3.12 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ] || apt-get install -y --no-install-recommends python3.12-dev; }
COPY --from=torch /opt/venv /opt/venv
COPY --from=torch /etc/pip/constraint.txt /etc/pip/constraint.txt
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/ext,target=/kiln/ext \
    --mount=type=cache,id=kiln-pip,target=/root/.cache/pip,sharing=locked \
    --mount=type=cache,id=kiln-ccache,target=/root/.cache/ccache \
    --mount=type=cache,id=kiln-wheel-cache,target=/kiln/wheel-cache,sharing=locked \
    . /kiln/sources.sh \
    && . /kiln/ext/build.sh \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python -c /etc/pip/constraint.txt  \
    && kiln_check_nvcc 12.8
ENV CUDA_HOME="/usr/local/cuda" \
    PATH=/usr/lib/ccache:/usr/local/cuda/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    TORCH_CUDA_ARCH_LIST="7.0;10.0+PTX" \
    TORCH_NVCC_FLAGS="-Xfatbin -compress-all" \
    NVCC_APPEND_FLAGS="-Xfatbin -compress-all" \
    PYTORCH_NVCC="ccache /usr/local/cuda/bin/nvcc" \
    CCACHE_DIR="/root/.cache/ccache" \
    CMAKE_GENERATOR="Ninja"

# dev: the toolchain stage (torch's own nvcc for CUDA, g++, Ninja, ccache) plus the packages, git,
# uv and sudo (the user installs apt and pip packages with it), for building and interactive work
FROM toolchain AS dev
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential git ninja-build ccache sudo
COPY .kiln/bin/uv /usr/local/bin/uv
RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln \
    && echo 'kiln ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/kiln && chmod 0440 /etc/sudoers.d/kiln
ENV CCACHE_DIR="/home/kiln/.cache/ccache"
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    PIP_CONSTRAINT="/etc/pip/constraint.txt" \
    UV_CONSTRAINT="/etc/pip/constraint.txt" \
    NVIDIA_VISIBLE_DEVICES="all" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=12.0" \
    TORCH_CUDA_ARCH_LIST="7.0;10.0+PTX"
LABEL org.opencontainers.image.title="acme/torch-src" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.7.1" \
      io.torchkiln.variant="cu128" \
      io.torchkiln.python="3.12" \
      io.torchkiln.cuda="12.8" \
      io.torchkiln.arch-list="7.0;10.0+PTX" \
      io.torchkiln.wheel-arch-list="7.0;10.0+PTX" \
      io.torchkiln.targets="V100=7.0,B200=10.0" \
      io.torchkiln.min-driver="570.26" \
      io.torchkiln.pruned="torch" \
      io.torchkiln.pruned-to="7.0,10.0+ptx"
WORKDIR /workspace
USER 1000:1000
CMD ["bash"]

# runtime: the torch and packages stages' layers as they are (not a copy of the venv: that would be a
# second 1-6 GB layer to write and export) + app; no compilers, no package caches, non-root by default
FROM torch AS runtime
ARG SOURCE_DATE_EPOCH=315532800
RUN touch /tmp/kiln-user-mark && useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln && mkdir -p /workspace \
    && find /etc /home /var /workspace -xdev -newer /tmp/kiln-user-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-user-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    PIP_CONSTRAINT="/etc/pip/constraint.txt" \
    UV_CONSTRAINT="/etc/pip/constraint.txt" \
    NVIDIA_VISIBLE_DEVICES="all" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=12.0" \
    TORCH_CUDA_ARCH_LIST="7.0;10.0+PTX"
LABEL org.opencontainers.image.title="acme/torch-src" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.7.1" \
      io.torchkiln.variant="cu128" \
      io.torchkiln.python="3.12" \
      io.torchkiln.cuda="12.8" \
      io.torchkiln.arch-list="7.0;10.0+PTX" \
      io.torchkiln.wheel-arch-list="7.0;10.0+PTX" \
      io.torchkiln.targets="V100=7.0,B200=10.0" \
      io.torchkiln.min-driver="570.26" \
      io.torchkiln.pruned="torch" \
      io.torchkiln.pruned-to="7.0,10.0+ptx"
WORKDIR /workspace
USER 1000:1000
CMD ["python"]
