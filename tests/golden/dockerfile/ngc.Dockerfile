# Rendered by torchkiln 0.1.0 for torchkiln/example-ngc:25.12. Do not edit: change kiln.toml and re-render.
# torch 2.10.0a0+b4e4ee81d3 · CUDA 13.1 (cu131) · Python 3.12 · base nvcr.io/nvidia/pytorch:25.12-py3
# GPU targets: H100 (9.0), B200 (10.0) · TORCH_CUDA_ARCH_LIST=9.0;10.0+PTX
# Build with BuildKit (`kiln build`, or DOCKER_BUILDKIT=1 docker build --target runtime .).
# torch is the base image's own (knowledge base row NGC 25.12 (the image was not read)): installs are constrained to it, never replace it.

# base: nvcr.io/nvidia/pytorch:25.12-py3 as it is (its torch, Python, CUDA, nvcc, /etc/pip/constraint.txt and environment untouched)
FROM nvcr.io/nvidia/pytorch:25.12-py3 AS base
# the folders and files BuildKit mounts over in a RUN exist beforehand, at a fixed time, so no step's
# layer records when BuildKit created and removed them (render/reproducible.py)
ADD .kiln/mount-points.tar /
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# packages: the spec's packages and extension wheels in the image's Python, constrained by the image's
# constraints and a pin of its torch (a package that wants another torch fails here); torch's files are
# checked to be the very files the image brought. What this step wrote gets the time SOURCE_DATE_EPOCH,
# the image's own files are left as they are (render/reproducible.py)
FROM base AS packages
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG SOURCE_DATE_EPOCH=315532800
RUN --mount=type=tmpfs,target=/kiln \
    --mount=type=tmpfs,target=/run/secrets \
    --mount=type=bind,source=.kiln/bin/uv,target=/kiln/bin/uv \
    --mount=type=bind,source=.kiln/sources.sh,target=/kiln/sources.sh \
    --mount=type=bind,source=.kiln/wheels,target=/kiln/wheels \
    --mount=type=cache,id=/root/.cache/uv,target=/kiln/uv-cache,sharing=locked \
    --mount=type=secret,id=kiln-uv,target=/run/secrets/kiln-uv \
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \
    --mount=type=bind,source=.kiln/requirements.txt,target=/kiln/requirements.txt \
    --mount=type=bind,source=.kiln/pin-torch.txt,target=/kiln/pin-torch.txt \
    . /kiln/sources.sh \
    && export UV_CACHE_DIR=/kiln/uv-cache \
    && touch /tmp/kiln-packages-mark \
    && find /usr/local/lib/python3.12/dist-packages/torch -type f -print0 | sort -z | xargs -0 sha256sum > /tmp/kiln-torch.sha256 \
    && /kiln/bin/uv pip install --python /usr/bin/python3.12 --system --break-system-packages -c /etc/pip/constraint.txt -c /kiln/pin-torch.txt -r /kiln/requirements.txt \
    && sha256sum --quiet -c /tmp/kiln-torch.sha256 \
    && rm /tmp/kiln-torch.sha256 \
    && /usr/bin/python3.12 -c 'import torch; v = torch.__version__; assert v == "2.10.0a0+b4e4ee81d3", "torch was replaced: " + v' \
    && find /tmp -maxdepth 1 -name 'uv-*.lock' -newer /tmp/kiln-packages-mark -delete \
    && find /usr/local/lib/python3.12/dist-packages -path '*.dist-info/uv_cache.json' -newer /tmp/kiln-packages-mark -exec sh -c 'for f; do rm -f "$f" && sed -i "/\.dist-info\/uv_cache\.json,/d" "${f%/uv_cache.json}/RECORD"; done' sh {} + \
    && find /usr/local /root /etc -xdev -newer /tmp/kiln-packages-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-packages-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp

# dev: the packages stage with a shell (the base is already a development image: compilers, nvcc)
FROM packages AS dev
ARG SOURCE_DATE_EPOCH=315532800
RUN touch /tmp/kiln-user-mark && (id -u 1000 >/dev/null 2>&1 || useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln) \
    && find /etc /home /var -xdev -newer /tmp/kiln-user-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-user-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp
ENV NVIDIA_VISIBLE_DEVICES="all" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0" \
    TORCH_CUDA_ARCH_LIST="9.0;10.0+PTX"
LABEL org.opencontainers.image.title="torchkiln/example-ngc" \
      org.opencontainers.image.version="25.12" \
      org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:25.12-py3" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.10.0a0+b4e4ee81d3" \
      io.torchkiln.variant="cu131" \
      io.torchkiln.python="3.12" \
      io.torchkiln.torch-source="image" \
      io.torchkiln.ngc="25.12" \
      io.torchkiln.cuda="13.1" \
      io.torchkiln.arch-list="9.0;10.0+PTX" \
      io.torchkiln.targets="H100=9.0,B200=10.0" \
      io.torchkiln.min-driver="580.65.06"
WORKDIR /workspace
USER 1000:1000
CMD ["bash"]

# runtime: the packages stage + the app, non-root by default; the base is a development image (nvcc, headers, compilers), kept as it is: no slim stage is made from it
FROM packages AS runtime
ARG SOURCE_DATE_EPOCH=315532800
RUN touch /tmp/kiln-user-mark && (id -u 1000 >/dev/null 2>&1 || useradd --create-home --uid 1000 --user-group --shell /bin/bash kiln) \
    && find /etc /home /var -xdev -newer /tmp/kiln-user-mark -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + && rm -f /tmp/kiln-user-mark && touch -h -d "@$SOURCE_DATE_EPOCH" /tmp
ENV NVIDIA_VISIBLE_DEVICES="all" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0" \
    TORCH_CUDA_ARCH_LIST="9.0;10.0+PTX"
LABEL org.opencontainers.image.title="torchkiln/example-ngc" \
      org.opencontainers.image.version="25.12" \
      org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:25.12-py3" \
      io.torchkiln.version="0.1.0" \
      io.torchkiln.torch="2.10.0a0+b4e4ee81d3" \
      io.torchkiln.variant="cu131" \
      io.torchkiln.python="3.12" \
      io.torchkiln.torch-source="image" \
      io.torchkiln.ngc="25.12" \
      io.torchkiln.cuda="13.1" \
      io.torchkiln.arch-list="9.0;10.0+PTX" \
      io.torchkiln.targets="H100=9.0,B200=10.0" \
      io.torchkiln.min-driver="580.65.06"
WORKDIR /workspace
COPY --chown=1000:1000 apps/cpu_app.py /workspace/apps/cpu_app.py
USER 1000:1000
CMD ["python", "apps/cpu_app.py"]
