# Sourced by the RUN steps of torchkiln's builder stages (rendered by torchkiln; do not edit).
# Mounted from the build context during those steps only: nothing here reaches an image.
KILN_PY=${KILN_PY:-/opt/venv/bin/python}
KILN_UV=${KILN_UV:-/kiln/bin/uv}
KILN_WHEEL_CACHE=${KILN_WHEEL_CACHE:-/kiln/wheel-cache}

kiln_log() { echo "kiln: $*" >&2; }

# MAX_JOBS = min(CPU cores, available memory GiB / GiB per job), at least 1; honours a cgroup limit.
kiln_jobs() (
    per_job_gib=$1
    cores=$(nproc)
    mem_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do
        if [ -r "$f" ]; then
            limit=$(cat "$f")
            if [ "$limit" != max ] && [ -n "$limit" ] && [ $((limit / 1024)) -lt "$mem_kib" ]; then
                mem_kib=$((limit / 1024))
            fi
            break
        fi
    done
    jobs=$((mem_kib / (per_job_gib * 1048576)))
    if [ "$jobs" -gt "$cores" ]; then jobs=$cores; fi
    if [ "$jobs" -lt 1 ]; then jobs=1; fi
    kiln_log "MAX_JOBS=$jobs (cores $cores, available memory $((mem_kib / 1048576)) GiB, $per_job_gib GiB per job)"
    echo "$jobs"
)

# pip (which builds the wheels) reads the same sources as uv: the kiln-uv secret and the kiln-ca bundle.
kiln_pip_sources() (
    set -eu
    "$KILN_PY" - <<'PY'
import os
import shlex

try:
    import tomllib
except ImportError:  # Python < 3.11
    from pip._vendor import tomli as tomllib

cfg = {}
path = os.environ.get("UV_CONFIG_FILE")
if path and os.path.exists(path):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    cfg = {**cfg, **cfg.get("pip", {})}
out = {}
index = cfg.get("index-url")
extra = list(cfg.get("extra-index-url", []))
for entry in cfg.get("index", []):
    if entry.get("default"):
        index = entry["url"]
    else:
        extra.append(entry["url"])
if index:
    out["PIP_INDEX_URL"] = index
if extra:
    out["PIP_EXTRA_INDEX_URL"] = " ".join(extra)
if cfg.get("find-links"):
    out["PIP_FIND_LINKS"] = " ".join(cfg["find-links"])
if cfg.get("no-index"):
    out["PIP_NO_INDEX"] = "1"
if os.environ.get("SSL_CERT_FILE"):
    out["PIP_CERT"] = os.environ["SSL_CERT_FILE"]
    out["GIT_SSL_CAINFO"] = os.environ["SSL_CERT_FILE"]
for key, value in sorted(out.items()):
    print(f"export {key}={shlex.quote(value)}")
PY
)

# One CUDA_HOME from NVIDIA's CUDA wheels: every nvidia/<pkg>/ folder of the venv merged as symlinks,
# plus the unversioned library names the linker looks for (libcudart.so -> libcudart.so.13).
kiln_cuda_home() (
    set -eu
    home=$1
    site=$("$KILN_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if ! ls -d "$site"/nvidia/*/ >/dev/null 2>&1; then
        kiln_log "no NVIDIA CUDA wheels in $site"
        exit 1
    fi
    mkdir -p "$home"
    for d in "$site"/nvidia/*/; do
        cp -rsf "${d%/}/." "$home/"
    done
    if [ ! -e "$home/lib64" ]; then ln -s lib "$home/lib64"; fi
    cd "$home/lib"
    for f in *.so.*; do
        [ -e "$f" ] || continue
        base="${f%%.so.*}.so"
        if [ ! -e "$base" ]; then ln -s "$f" "$base"; fi
    done
    kiln_log "CUDA_HOME $home assembled from $(ls -d "$site"/nvidia/*/ | wc -l) NVIDIA wheel folders"
)

# The compiler must be torch's CUDA major.minor (apex, flash-attn and torch itself refuse others).
kiln_check_nvcc() (
    set -eu
    want=$1
    have=$("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
    torch_cuda=$("$KILN_PY" -c 'import torch; print(torch.version.cuda)' 2>/dev/null || echo "$want")
    if [ "$have" != "$want" ] || [ "$torch_cuda" != "$want" ]; then
        echo "kiln: CUDA toolkit mismatch: nvcc is CUDA $have, torch was built with CUDA $torch_cuda," \
            "the plan expects $want" >&2
        exit 1
    fi
    kiln_log "nvcc $have matches torch's CUDA $torch_cuda"
)

# A short hash of a source tree (the files only, not build outputs).
kiln_tree_hash() (
    set -eu
    cd "$1"
    find . -type f ! -path './build/*' ! -path '*.egg-info/*' ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12
)

# Copy the cached wheels of KEY into OUT; fails when nothing is cached.
kiln_cached() (
    dir="$KILN_WHEEL_CACHE/$1"
    ls "$dir"/*.whl >/dev/null 2>&1 || exit 1
    mkdir -p "$2" && cp "$dir"/*.whl "$2"/ || exit 2
    kiln_log "cached wheel for $1: $(cd "$dir" && ls -- *.whl)"
)

# Build WHAT (a requirement, a git URL or a source folder) into a wheel without build isolation,
# store it under KEY in the wheel cache, and copy it into OUT.
kiln_build() (
    set -eu
    eval "$(kiln_pip_sources)"
    dir="$KILN_WHEEL_CACHE/$1"
    rm -rf "$dir.part"
    mkdir -p "$dir.part"
    kiln_log "building $2 (MAX_JOBS=${MAX_JOBS:-unset}, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset})"
    "$KILN_PY" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check --progress-bar off \
        -w "$dir.part" "$2"
    rm -rf "$dir"
    mv "$dir.part" "$dir"
    mkdir -p "$3"
    cp "$dir"/*.whl "$3"/
    kiln_log "built $(cd "$dir" && ls -- *.whl)"
)

# The wheel of an extension: from the cache when its key is there, else built. A source folder's
# key gets the hash of its files.
kiln_wheel() (
    set -eu
    key=$1
    if [ -d "$2" ]; then key="$key-src$(kiln_tree_hash "$2")"; fi
    out=${3:-/opt/kiln-ext/wheels}
    kiln_cached "$key" "$out" || kiln_build "$key" "$2" "$out"
)

# A shallow checkout of REF (a tag, branch or commit) of URL with its submodules, reused when present.
kiln_checkout() (
    set -eu
    if [ "$(cat "$3/.kiln-ref" 2>/dev/null || true)" = "$1@$2" ]; then
        kiln_log "reusing the checkout of $1 at $2"
        exit 0
    fi
    if [ -n "${SSL_CERT_FILE:-}" ]; then export GIT_SSL_CAINFO="$SSL_CERT_FILE"; fi
    mkdir -p "$3"
    find "$3" -mindepth 1 -delete
    git -C "$3" init -q
    git -C "$3" remote add origin "$1"
    git -C "$3" fetch -q --depth 1 origin "$2"
    git -C "$3" checkout -q FETCH_HEAD
    git -C "$3" submodule update -q --init --recursive --depth 1 --jobs 4
    echo "$1@$2" > "$3/.kiln-ref"
)

# The CUDA library wheels a source-built torch links against, pinned, in PYTORCH_EXTRA_INSTALL_REQUIREMENTS form.
kiln_cuda_requirements() (
    set -eu
    "$KILN_UV" pip freeze --python "$KILN_PY" \
        | { grep -E '^nvidia-' || true; } \
        | { grep -vE '^nvidia-(cuda-nvcc|cuda-crt|cuda-cccl|nvvm)' || true; } \
        | paste -sd '|' - | sed 's/|/ | /g'
)

# PyTorch's wheel from a pinned checkout: cached by KEY, else checked out and built.
kiln_torch_wheel() (
    set -eu
    out=/opt/kiln-torch
    src=/kiln/torch-src
    if kiln_cached "$1" "$out"; then exit 0; fi
    kiln_checkout "$2" "$3" "$src"
    for r in requirements-build.txt requirements.txt; do
        if [ -f "$src/$r" ]; then "$KILN_UV" pip install --python "$KILN_PY" -r "$src/$r"; fi
    done
    PYTORCH_EXTRA_INSTALL_REQUIREMENTS=$(kiln_cuda_requirements)
    export PYTORCH_EXTRA_INSTALL_REQUIREMENTS
    kiln_log "the wheel will depend on: ${PYTORCH_EXTRA_INSTALL_REQUIREMENTS:-(no CUDA wheels)}"
    kiln_build "$1" "$src" "$out"
)
