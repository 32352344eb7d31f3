"""Builder stages: compiled extensions and PyTorch from source, built the NGC way. Pure and deterministic.

Stages (inserted by ``render/dockerfile.py`` between ``packages`` and ``dev``; none when nothing is
compiled):

* ``torch-build`` (``[torch] source = "git"``) FROM base: the CUDA toolchain and libraries, a pinned
  checkout of PyTorch, and its wheel built with ``TORCH_CUDA_ARCH_LIST`` from the targets,
  ``TORCH_NVCC_FLAGS="-Xfatbin -compress-all"``, CUDA/cuDNN/NCCL/distributed on, ``BUILD_TEST=0``,
  Ninja, ccache and a memory-aware ``MAX_JOBS``. The ``torch`` stage installs only that wheel.
* ``toolchain`` FROM torch: the exact torch of the runtime plus a CUDA compiler of torch's own
  CUDA major.minor (NVIDIA's compiler wheels from the package index merged into ``/usr/local/cuda``,
  or the base image's nvcc when it is a CUDA devel image of that version), g++, ccache, Ninja.
* ``extensions`` FROM toolchain: one RUN per compiled extension, ``pip wheel --no-build-isolation``
  with the package's own build variables. Wheels are cached in a cache mount under a key made of
  (package, version, torch, CUDA, Python, arch list, build variables); a local source tree adds
  the hash of its files at build time.
* ``wheels`` FROM scratch: the built wheels alone (``--target wheels --output type=local,dest=DIR``).
* ``ext-layer`` FROM packages (or torch): the wheels (and exactly matching prebuilt wheels)
  installed into the venv in a stage without any compiler; only the files they add are collected
  into ``/opt/kiln-ext-layer``, which ``dev`` and ``runtime`` copy as one layer.

``MAX_JOBS`` is computed inside the RUN (``kiln_jobs``: min(cores, available memory / GiB per
job), cgroup-aware) unless it is set by the spec's ``env`` or ``--build-arg MAX_JOBS=N``, so the
Dockerfile text never depends on the machine that renders it. The shell helpers live in
``.kiln/ext/build.sh`` (rendered here, mounted into the builder steps, never into an image).

Our own code: no library renders BuildKit builder stages for torch extensions.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import replace

from torchkiln.contract import CONSTRAINTS, UV, VENV
from torchkiln.plan import BuildPlan, ExtensionPlan
from torchkiln.render import instructions as ins

CUDA_HOME = "/usr/local/cuda"
EXT_WHEELS = "/opt/kiln-ext/wheels"
EXT_LAYER = "/opt/kiln-ext-layer"
TORCH_WHEEL = "/opt/kiln-torch"
TORCH_SRC = "/kiln/torch-src"
BUILD_SH = ".kiln/ext/build.sh"
COMPRESS = "-Xfatbin -compress-all"
SRC_IN_BUILD = "/kiln/src"



def _build_mounts() -> list[str]:
    """The helper script, pip's download cache, ccache, and the wheel cache (keyed folders inside)."""
    return [
        ins.bind("ext"),
        "type=cache,id=kiln-pip,target=/root/.cache/pip,sharing=locked",
        "type=cache,id=kiln-ccache,target=/root/.cache/ccache",
        "type=cache,id=kiln-wheel-cache,target=/kiln/wheel-cache,sharing=locked",
    ]


# -- what the plan asks for --------------------------------------------------------------------------


def compiled(plan: BuildPlan) -> tuple[ExtensionPlan, ...]:
    """The extensions compiled in the extensions stage."""
    return tuple(e for e in plan.extensions if e.build == "source")


def prebuilt(plan: BuildPlan) -> tuple[ExtensionPlan, ...]:
    """The extensions installed from an exactly matching prebuilt wheel."""
    return tuple(e for e in plan.extensions if e.build == "prebuilt")


def has_builder(plan: BuildPlan) -> bool:
    return bool(compiled(plan))


def has_toolchain(plan: BuildPlan) -> bool:
    """A toolchain stage is rendered: for the builder stages, or for the dev stage alone (its nvcc)."""
    return has_builder(plan) or plan.dev_toolchain is not None


def has_ext_layer(plan: BuildPlan) -> bool:
    return bool(plan.extensions)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def cache_key(plan: BuildPlan, ext: ExtensionPlan) -> str:
    """The wheel cache key: (package, version, torch, CUDA, Python, arch list, build variables, toolchain)."""
    torch = plan.torch.build.version if plan.torch.build else plan.torch.requirement
    parts = [
        ext.name, ext.version or "", ext.git or "", ext.ref or "", ext.path or "", torch,
        plan.torch.variant, plan.python, plan.arch_list,
        ";".join(f"{k}={v}" for k, v in ext.env),
        plan.toolchain.kind if plan.toolchain else "",
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    label = ext.version or (ext.ref[:12] if ext.ref else "local" if ext.path else "latest")
    return _slug(f"{ext.name}-{label}-{plan.torch.variant}-py{plan.python}-{digest}")


def torch_cache_key(plan: BuildPlan) -> str:
    b = plan.torch.build
    assert b is not None
    tc = plan.toolchain
    parts = [b.git, b.ref, b.version, plan.python, plan.arch_list, ";".join(f"{k}={v}" for k, v in b.env),
             tc.kind if tc else "", ";".join(tc.libraries) if tc else ""]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return _slug(f"torch-{b.version}-py{plan.python}-{digest}")


def _src_target(ext: ExtensionPlan) -> str:
    return f"{SRC_IN_BUILD}/{_slug(ext.name)}"


# -- shared pieces -----------------------------------------------------------------------------------


def _builder_apt(plan: BuildPlan, python: str) -> list[str]:
    """apt: the host compiler and tools, and Python's headers when the base image lacks them.

    A builder stage on its own image (the devel sibling of the runtime base) also gets the base
    stage's apt packages, Python among them.
    """
    tc = plan.toolchain
    packages = list(tc.apt if tc else ("build-essential", "ccache"))
    if tc is not None and tc.image:
        packages += [p for p in plan.apt_packages if p not in packages]
    headers = (
        f"{{ [ -f \"$({python} -c 'import sysconfig; print(sysconfig.get_path(\"include\"))')/Python.h\" ] "
        f"|| apt-get install -y --no-install-recommends {plan.python_exe}-dev; }}"
    )
    return ins.run(
        ins.APT_MOUNTS,
        [
            "rm -f /etc/apt/apt.conf.d/docker-clean",
            "apt-get update",
            "apt-get install -y --no-install-recommends " + " ".join(packages),
            headers,
        ],
    )


def _cuda_env(plan: BuildPlan) -> list[tuple[str, str]]:
    tc = plan.toolchain
    venv_path = f"{VENV}/bin:$PATH"
    if tc is None or not tc.cuda:
        return [("PATH", f"/usr/lib/ccache:{venv_path}"), ("VIRTUAL_ENV", VENV),
                ("CCACHE_DIR", "/root/.cache/ccache")]
    return [
        ("CUDA_HOME", tc.cuda_home),
        ("PATH", f"/usr/lib/ccache:{tc.cuda_home}/bin:{venv_path}"),
        ("VIRTUAL_ENV", VENV),
        ("TORCH_CUDA_ARCH_LIST", plan.arch_list),
        ("TORCH_NVCC_FLAGS", COMPRESS),
        ("NVCC_APPEND_FLAGS", COMPRESS),
        ("PYTORCH_NVCC", f"ccache {tc.cuda_home}/bin/nvcc"),
        ("CCACHE_DIR", "/root/.cache/ccache"),
        ("CMAKE_GENERATOR", "Ninja"),
    ]


def _install_toolchain(plan: BuildPlan, extra: tuple[str, ...], *, constrained: bool,
                       libraries: bool) -> list[str]:
    """The commands that install the CUDA wheels and build requirements, then check nvcc against torch."""
    tc = plan.toolchain
    py = f"{VENV}/bin/python"
    reqs: list[str] = []
    if tc is not None and tc.kind == "wheels":
        reqs += list(tc.compiler)
        if libraries:
            reqs += [r for r in tc.libraries if r not in reqs]
    reqs += sorted(set(extra))
    constraint = f" -c {CONSTRAINTS}" if constrained else ""
    cmds = [
        f"{UV} pip install --python {py}{constraint} " + " ".join(shlex.quote(r) for r in reqs),
    ]
    if tc is not None and tc.kind == "wheels":
        cmds.append(f"kiln_cuda_home {tc.cuda_home}")
    if tc is not None and tc.cuda:
        cmds.append(f"kiln_check_nvcc {tc.cuda}")
    return cmds


def _exports(pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> list[str]:
    if not pairs:
        return []
    return ["export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in pairs)]


def _jobs(per_job_gib: int) -> str:
    return f'export MAX_JOBS="${{MAX_JOBS:-$(kiln_jobs {per_job_gib})}}"'


# -- stages ------------------------------------------------------------------------------------------


def stage_torch_build(plan: BuildPlan) -> list[str]:
    """PyTorch from source: only the wheel in /opt/kiln-torch leaves this stage."""
    b = plan.torch.build
    if b is None:
        return []
    tc = plan.toolchain
    env = _cuda_env(plan)
    env = [(k, v) for k, v in env if k not in ("NVCC_APPEND_FLAGS", "PYTORCH_NVCC")]
    env += [(k, v) for k, v in b.env if k not in dict(env)]
    if tc is not None and tc.kind == "wheels":
        env += [("CUDNN_ROOT", tc.cuda_home), ("NCCL_ROOT", tc.cuda_home),
                ("NCCL_INCLUDE_DIR", f"{tc.cuda_home}/include"), ("NCCL_LIB_DIR", f"{tc.cuda_home}/lib")]
    env += [("PYTORCH_BUILD_VERSION", b.version), ("PYTORCH_BUILD_NUMBER", "1")]
    setup = [
        ". /kiln/sources.sh",
        ". /kiln/ext/build.sh",
        f"{UV} venv --python {plan.python_exe} {VENV}",
        *_install_toolchain(plan, b.build_requires, constrained=False, libraries=True),
    ]
    return [
        f"# torch-build: PyTorch {b.ref} compiled from source the NGC way (pinned ref, TORCH_CUDA_ARCH_LIST from the",
        "# targets, compressed fat binaries, CUDA/cuDNN/NCCL/distributed on, no tests, Ninja, ccache, MAX_JOBS from",
        "# memory); only its wheel leaves this stage, and the torch stage installs nothing else from here",
        f"FROM {tc.image if tc is not None and tc.image else 'base'} AS torch-build",
        ins.SHELL,
        "ARG MAX_JOBS",
        *_builder_apt(plan, plan.python_exe),
        *ins.run([*ins.SOURCE_MOUNTS, *_build_mounts()], setup),
        *ins.env(env),
        *ins.run(
            [*ins.SOURCE_MOUNTS, *_build_mounts(),
             f"type=cache,id=kiln-torch-src,target={TORCH_SRC},sharing=locked"],
            [
                ". /kiln/sources.sh",
                ". /kiln/ext/build.sh",
                _jobs(b.memory_per_job_gib),
                f"kiln_torch_wheel {torch_cache_key(plan)} {shlex.quote(b.git)} {shlex.quote(b.ref)}",
                f"ls -l {TORCH_WHEEL}",
            ],
        ),
    ]


def torch_wheel_mount() -> str:
    """The torch stage's mount of the source-built wheel."""
    return f"type=bind,from=torch-build,source={TORCH_WHEEL},target=/kiln/torch-wheel"


def torch_wheel_requirement() -> str:
    return "/kiln/torch-wheel/torch-*.whl"


def stage_toolchain(plan: BuildPlan) -> list[str]:
    """The exact torch of the runtime plus a CUDA compiler of torch's CUDA, g++, Ninja and ccache."""
    if not has_toolchain(plan):
        return []
    used_by = "the builder stages and dev" if has_builder(plan) else "the dev stage"
    if plan.toolchain is None:
        plan = replace(plan, toolchain=plan.dev_toolchain)
    tc = plan.toolchain
    requires = tuple(sorted({r for e in compiled(plan) for r in e.build_requires}))
    if tc is None or not tc.cuda:
        what = "the host C++ compiler (CPU torch)"
    elif tc.kind == "wheels":
        what = f"torch's CUDA {tc.cuda} from NVIDIA's compiler wheels"
    elif tc.image:
        what = f"torch's CUDA {tc.cuda} from the runtime base's devel sibling"
    else:
        what = f"torch's CUDA {tc.cuda} from the base image"
    if tc is not None and tc.image:
        start = [f"FROM {tc.image} AS toolchain", ins.SHELL, *_builder_apt(plan, plan.python_exe),
                 f"COPY --from=torch {VENV} {VENV}", f"COPY --from=torch {CONSTRAINTS} {CONSTRAINTS}"]
    else:
        start = ["FROM torch AS toolchain", ins.SHELL, *_builder_apt(plan, plan.python_exe)]
    return [
        "# toolchain: the runtime's exact torch (same venv, same constraints file) plus a compiler:",
        f"# {what}, g++, Ninja and ccache; used by {used_by}, never by the runtime",
        *start,
        *ins.run([*ins.SOURCE_MOUNTS, *_build_mounts()],
                 [". /kiln/sources.sh", ". /kiln/ext/build.sh",
                  *_install_toolchain(plan, requires, constrained=True, libraries=False)]),
        *ins.env(_cuda_env(plan)),
    ]


def _ext_run(plan: BuildPlan, ext: ExtensionPlan) -> list[str]:
    mounts = [*ins.SOURCE_MOUNTS, *_build_mounts()]
    what = ext.spec
    if ext.path is not None:
        mounts.append(f"type=bind,source={ext.path},target={_src_target(ext)},rw")
        what = _src_target(ext)
    cmds = [
        ". /kiln/sources.sh",
        ". /kiln/ext/build.sh",
        *_exports(ext.env),
        _jobs(ext.memory_per_job_gib),
        f"kiln_wheel {cache_key(plan, ext)} {shlex.quote(what)}",
    ]
    title = ext.spec if ext.path is None else f"{ext.name} from {ext.path} (build context)"
    return [f"# {title}", *ins.run(mounts, cmds)]


def stage_extensions(plan: BuildPlan) -> list[str]:
    exts = compiled(plan)
    if not exts:
        return []
    lines = [
        "# extensions: each compiled extension built into a wheel against this exact torch, without build",
        "# isolation; wheels are cached by (package, version, torch, CUDA, Python, arch list) in a cache mount",
        "FROM toolchain AS extensions",
        "ARG MAX_JOBS",
    ]
    for ext in exts:
        lines += _ext_run(plan, ext)
    return lines


def stage_wheels(plan: BuildPlan) -> list[str]:
    return wheels_stage() if has_builder(plan) else []


def wheels_stage() -> list[str]:
    """The ``wheels`` stage, whichever renderer compiled the wheels in its ``extensions`` stage."""
    return [
        "# wheels: the compiled extension wheels alone (--target wheels --output type=local,dest=DIR)",
        "FROM scratch AS wheels",
        f"COPY --from=extensions {EXT_WHEELS}/ /",
    ]


def stage_ext_layer(plan: BuildPlan) -> list[str]:
    """Install the wheels without any compiler; collect only the files they add."""
    if not has_ext_layer(plan):
        return []
    py = f"{VENV}/bin/python"
    mounts = list(ins.SOURCE_MOUNTS)
    reqs: list[str] = []
    if has_builder(plan):
        mounts.append(f"type=bind,from=extensions,source={EXT_WHEELS},target=/kiln/ext-wheels")
        reqs.append("/kiln/ext-wheels/*.whl")
    reqs += [shlex.quote(e.prebuilt) for e in prebuilt(plan) if e.prebuilt]
    parent = "packages" if plan.pip_packages else "torch"
    if plan.prune is not None:
        mounts.append(ins.bind("prune"))
    return [
        "# ext-layer: the extension wheels installed into the venv in a stage without compilers, constrained so",
        "# nothing installed before can change; only the files they add are collected, as one layer",
        f"FROM {parent} AS ext-layer",
        ins.SHELL,
        *ins.run(
            mounts,
            [
                ". /kiln/sources.sh",
                f"touch {ins.MARK}",
                f"{UV} pip freeze --python {py} > /tmp/kiln-installed.txt",
                f"{UV} pip install --python {py} -c {CONSTRAINTS} -c /tmp/kiln-installed.txt " + " ".join(reqs),
                f"mkdir -p {EXT_LAYER}",
                ins.collect_added(EXT_LAYER),
                *ins.prune_files(plan, EXT_LAYER),
            ],
        ),
    ]


def copy_ext_layer(plan: BuildPlan) -> list[str]:
    """The runtime's (and dev's) copy of the installed extensions: files only, no wheels, no compiler."""
    if not has_ext_layer(plan):
        return []
    return [f"COPY --from=ext-layer {EXT_LAYER}/ {VENV}/"]


def builder_stages(plan: BuildPlan) -> list[list[str]]:
    """The blocks that go between ``packages`` and ``dev``."""
    return [stage_toolchain(plan), stage_extensions(plan), stage_wheels(plan), stage_ext_layer(plan)]


# -- build context -----------------------------------------------------------------------------------

BUILD_SH_TEXT = r"""# Sourced by the RUN steps of torchkiln's builder stages (rendered by torchkiln; do not edit).
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
"""


def context_files(plan: BuildPlan) -> dict[str, str]:
    """The helper script of the builder stages and the toolchain (only when something compiles)."""
    if not has_toolchain(plan) and plan.torch.build is None:
        return {}
    return {BUILD_SH: BUILD_SH_TEXT}


def context_paths(plan: BuildPlan) -> tuple[str, ...]:
    """Local extension source trees the build context must carry (relative to the spec's folder)."""
    return tuple(e.path for e in compiled(plan) if e.path is not None)
