# Rendered by torchkiln 0.1.0 for acme/apex:latest. Do not edit: change kiln.toml and re-render.
# torch 2.14.1 · CUDA 13.0 (cu130) · Python 3.11 · base python:3.11-slim-bookworm
# GPU targets: H100 (9.0) · TORCH_CUDA_ARCH_LIST=9.0+PTX
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
# torch's fat binaries keep only the device code of 9.0 (kiln prune; [gpu] prune = false keeps them whole)
# Every file this step writes gets the time SOURCE_DATE_EPOCH (render/reproducible.py): the venv's files
# and .pyc come out identical, times included, from two builds with no shared cache
FROM base AS torch
ARG SOURCE_DATE_EPOCH=315532800
# the CUDA libraries torch pins, each in a layer of its own below torch's, from what changes least to what
# changes most: an image of the next torch that pins the same libraries shares these layers (render/layer_plan.py)
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    --mount=type=bind,source=.kiln/requirements-torch.txt,target=/kiln/requirements-torch.txt \
    . /kiln/sources.sh \
    && UV_CACHE_DIR=/tmp/kiln-uv-torch /kiln/bin/uv venv --python python3.11 /opt/venv \
    && mkdir -p /etc/pip \
    && UV_CACHE_DIR=/tmp/kiln-uv-torch /kiln/bin/uv pip compile --python /opt/venv/bin/python --quiet --no-header --no-annotate -o /kiln/torch-set/requirements.txt /kiln/requirements-torch.txt \
    && rm -rf /tmp/kiln-uv-torch \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.](cuda[-_.]runtime|cuda[-_.]nvrtc|cuda[-_.]cupti|nvtx|cufile|curand)([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cusparse([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cusolver([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cufft([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cublas([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]nvjitlink([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cudnn([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]cusparselt([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]nccl([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^nvidia[-_.]nvshmem([-_.]cu[0-9]+)?==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=cache,id=kiln-torch-set-9e4917393ea526b8,target=/kiln/torch-set,sharing=locked \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && { grep -iE '^triton==' /kiln/torch-set/requirements.txt || true; } > /tmp/kiln-layer.txt \
    && if [ -s /tmp/kiln-layer.txt ]; then /kiln/bin/uv pip install --python /opt/venv/bin/python --no-deps -r /tmp/kiln-layer.txt; fi \
    && rm -rf /tmp/kiln-uv-torch /tmp/kiln-layer.txt \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/requirements-torch.txt,target=/kiln/requirements-torch.txt \
    --mount=type=bind,source=.kiln/prune,target=/kiln/prune \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0 \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python -r /kiln/requirements-torch.txt \
    && rm -rf /opt/venv/lib/python3.11/site-packages/torch/test \
    && /opt/venv/bin/python -B /kiln/prune/prune.py --targets 9.0 --ptx /opt/venv/lib/python3.11/site-packages/torch \
    && mkdir -p /etc/pip \
    && /kiln/bin/uv pip freeze --python /opt/venv/bin/python > /etc/pip/constraint.txt \
    && rm -rf /tmp/kiln-uv-torch \
    && mkdir -p /root/.cache/uv \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run \
    && /opt/venv/bin/python -c 'import torch' \
    && rm -rf /tmp/torchinductor_* \
    && find /opt/venv -path '*.dist-info/uv_cache.json' -newermt "@$SOURCE_DATE_EPOCH" -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + && find /opt/venv /etc/pip /root -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && touch -c -h -d "@$SOURCE_DATE_EPOCH" /etc /tmp /opt /run

# toolchain: the runtime's exact torch (same venv, same constraints file) plus a compiler:
# torch's CUDA 13.0 from NVIDIA's compiler wheels, g++, Ninja and ccache; used by the builder stages and dev, never by the runtime
FROM torch AS toolchain
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential ccache git \
    && { [ -f "$(python3.11 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ] || apt-get install -y --no-install-recommends python3.11-dev; }
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
    && /kiln/bin/uv pip install --python /opt/venv/bin/python -c /etc/pip/constraint.txt 'cuda-toolkit[nvcc,cccl,crt,nvvm,cudart]==13.0.*' ninja packaging pip setuptools wheel \
    && kiln_cuda_home /usr/local/cuda \
    && kiln_check_nvcc 13.0
ENV CUDA_HOME="/usr/local/cuda" \
    PATH=/usr/lib/ccache:/usr/local/cuda/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    TORCH_CUDA_ARCH_LIST="9.0+PTX" \
    TORCH_NVCC_FLAGS="-Xfatbin -compress-all" \
    NVCC_APPEND_FLAGS="-Xfatbin -compress-all" \
    PYTORCH_NVCC="ccache /usr/local/cuda/bin/nvcc" \
    CCACHE_DIR="/root/.cache/ccache" \
    CMAKE_GENERATOR="Ninja"

# extensions: each compiled extension built into a wheel against this exact torch, without build
# isolation; wheels are cached by (package, version, torch, CUDA, Python, arch list) in a cache mount
FROM toolchain AS extensions
ARG MAX_JOBS
# apex @ git+https://github.com/NVIDIA/apex@705cba91fc26413d484f5ce2983427d840199a97
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
    && export APEX_CPP_EXT=1 APEX_CUDA_EXT=1 \
    && export MAX_JOBS="${MAX_JOBS:-$(kiln_jobs 4)}" \
    && kiln_wheel apex-705cba91fc26-cu130-py3.11-7afec0d187da 'apex @ git+https://github.com/NVIDIA/apex@705cba91fc26413d484f5ce2983427d840199a97'

# wheels: the compiled extension wheels alone (--target wheels --output type=local,dest=DIR)
FROM scratch AS wheels
COPY --from=extensions /opt/kiln-ext/wheels/ /

# ext-layer: the extension wheels installed into the venv in a stage without compilers, constrained so
# nothing installed before can change; only the files they add are collected, as one layer
FROM torch AS ext-layer
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,from=extensions,source=/opt/kiln-ext/wheels,target=/kiln/ext-wheels \
    --mount=type=bind,source=.kiln/prune,target=/kiln/prune \
    . /kiln/sources.sh \
    && touch /tmp/kiln-mark \
    && /kiln/bin/uv pip freeze --python /opt/venv/bin/python > /tmp/kiln-installed.txt \
    && /kiln/bin/uv pip install --python /opt/venv/bin/python -c /etc/pip/constraint.txt -c /tmp/kiln-installed.txt /kiln/ext-wheels/*.whl \
    && mkdir -p /opt/kiln-ext-layer \
    && find /opt/venv -newercc /tmp/kiln-mark ! -type d -printf '%P\n' | tar -C /opt/venv --no-recursion -T - -cf - | tar -C /opt/kiln-ext-layer -xf - \
    && /opt/venv/bin/python -B /kiln/prune/prune.py --targets 9.0 --ptx /opt/kiln-ext-layer

# dev: the toolchain stage (torch's own nvcc for CUDA, g++, Ninja, ccache) plus the packages, git,
# uv and sudo (the user installs apt and pip packages with it), for building and interactive work
FROM toolchain AS dev
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends build-essential git ninja-build ccache sudo
COPY --from=ext-layer /opt/kiln-ext-layer/ /opt/venv/
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
    NVIDIA_REQUIRE_CUDA="cuda>=13.0" \
    TORCH_CUDA_ARCH_LIST="9.0+PTX"
LABEL org.opencontainers.image.title="acme/apex" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.14.1" \
      io.torchkiln.variant="cu130" \
      io.torchkiln.python="3.11" \
      io.torchkiln.cuda="13.0" \
      io.torchkiln.arch-list="9.0+PTX" \
      io.torchkiln.wheel-arch-list="7.5;8.0;8.6;9.0;10.0;12.0" \
      io.torchkiln.targets="H100=9.0" \
      io.torchkiln.min-driver="580.65.06" \
      io.torchkiln.pruned="torch,extension-libraries" \
      io.torchkiln.pruned-to="9.0+ptx"
WORKDIR /workspace
USER 1000:1000
CMD ["bash"]

# runtime: the torch and packages stages' layers as they are (not a copy of the venv: that would be a
# second 1-6 GB layer to write and export) + app; no compilers, no package caches, non-root by default
FROM torch AS runtime
ARG SOURCE_DATE_EPOCH=315532800
RUN touch /tmp/kiln-user-mark && useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln && mkdir -p /workspace \
    && find /etc /home /var /workspace -xdev -newer /tmp/kiln-user-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-user-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp
COPY --from=ext-layer /opt/kiln-ext-layer/ /opt/venv/
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV="/opt/venv" \
    PIP_CONSTRAINT="/etc/pip/constraint.txt" \
    UV_CONSTRAINT="/etc/pip/constraint.txt" \
    NVIDIA_VISIBLE_DEVICES="all" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0" \
    TORCH_CUDA_ARCH_LIST="9.0+PTX"
LABEL org.opencontainers.image.title="acme/apex" \
      org.opencontainers.image.version="latest" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.14.1" \
      io.torchkiln.variant="cu130" \
      io.torchkiln.python="3.11" \
      io.torchkiln.cuda="13.0" \
      io.torchkiln.arch-list="9.0+PTX" \
      io.torchkiln.wheel-arch-list="7.5;8.0;8.6;9.0;10.0;12.0" \
      io.torchkiln.targets="H100=9.0" \
      io.torchkiln.min-driver="580.65.06" \
      io.torchkiln.pruned="torch,extension-libraries" \
      io.torchkiln.pruned-to="9.0+ptx"
WORKDIR /workspace
USER 1000:1000
CMD ["python"]
