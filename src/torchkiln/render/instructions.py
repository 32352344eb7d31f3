"""Dockerfile instructions the renderers share: quoting, RUN with mounts, the mounts themselves.

``render/dockerfile.py`` (the stages), ``render/extensions.py`` (the compiling stages) and
``render/vendor.py`` (the stages on a base with its own torch) write with these, so none imports
another for them: RUN, multi-line ENV and LABEL, the runtime's GPU variables. ``rendered_by`` opens the Apptainer
definition file too (``#`` comments in both). Pure text.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping

from torchkiln import __version__
from torchkiln.contract import SECRET_CA, SECRET_UV, VENV
from torchkiln.plan import BuildPlan
from torchkiln.render import reproducible

SHELL = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]'


def quote(value: str) -> str:
    """Quote a value for ENV/LABEL lines (JSON string quoting is valid Dockerfile quoting)."""
    return json.dumps(value)


def run(mounts: list[str], commands: list[str]) -> list[str]:
    """A RUN instruction: one mount per line, then the commands joined with ``&&``. Mounts below ``/kiln`` or
    ``/run/secrets`` get a tmpfs there first (render/reproducible.py: no mount point reaches a layer)."""
    targets = [m.split("target=", 1)[1].split(",", 1)[0] for m in mounts if "target=" in m]
    mounts = [*reproducible.tmpfs_mounts(targets), *mounts]
    parts = [f"--mount={m}" for m in mounts] + [commands[0]] + [f"&& {c}" for c in commands[1:]]
    lines = ["RUN " + parts[0]]
    lines += [f"    {p}" for p in parts[1:]]
    return [line + " \\" for line in lines[:-1]] + [lines[-1]]


def rendered_by(plan: BuildPlan) -> list[str]:
    """The comment lines that open a Dockerfile and a definition file alike: who wrote it, for what."""
    t = plan.torch
    cuda = f"CUDA {t.cuda} ({t.variant})" if t.cuda else "CPU only"
    targets = ", ".join(f"{x.name} ({x.capability})" for x in plan.targets) or "none"
    return [
        f"# Rendered by torchkiln {__version__} for {plan.image_ref}. Do not edit: change kiln.toml and re-render.",
        f"# torch {t.version} · {cuda} · Python {plan.python} · base {plan.base_image}",
        f"# GPU targets: {targets}" + (f" · TORCH_CUDA_ARCH_LIST={plan.arch_list}" if plan.arch_list else ""),
    ]


def block(keyword: str, items: list[str]) -> list[str]:
    """One instruction over several lines (``ENV A=1 \\``, ``    B=2``): each item on its own line, aligned
    under the first."""
    pad = " " * (len(keyword) + 1)
    return [(f"{keyword} " if i == 0 else pad) + item + (" \\" if i < len(items) - 1 else "")
            for i, item in enumerate(items)]


def env(pairs: Iterable[tuple[str, str]], *, unquoted: Collection[str] = ("PATH",)) -> list[str]:
    """An ENV instruction (none for no pairs): values quoted, except those of ``unquoted`` (``$PATH`` expands)."""
    return block("ENV", [f"{k}={v if k in unquoted else quote(v)}" for k, v in pairs])


def labels(pairs: Mapping[str, str]) -> list[str]:
    """A LABEL instruction (none for no pairs), values quoted."""
    return block("LABEL", [f"{k}={quote(v)}" for k, v in pairs.items()])


def gpu_env(plan: BuildPlan) -> list[tuple[str, str]]:
    """What a CUDA image tells the NVIDIA container runtime (devices, capabilities, the CUDA it needs), and the
    archs for extensions compiled at run time; none for a CPU image."""
    if not plan.torch.cuda:
        return []
    pairs = [("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")]
    if plan.nvidia_require_cuda:
        pairs.append(("NVIDIA_REQUIRE_CUDA", plan.nvidia_require_cuda))
    if plan.arch_list:
        pairs.append(("TORCH_CUDA_ARCH_LIST", plan.arch_list))
    return pairs


def drop_torch_tests(plan: BuildPlan) -> str:
    """Remove ``torch/test``: the wheel's C++ gtest binaries (86 MB in torch 2.13's CPU wheel, 108 files),
    which no Python code loads; ``kiln inspect`` counts them as waste in a runtime image."""
    return f"rm -rf {VENV}/lib/python{plan.python}/site-packages/torch/test"


#: where the build context's copy of the stdlib-only pruner (prune.py + fatbin.py) is mounted
PRUNE_DIR = "/kiln/prune"


def prune_files(plan: BuildPlan, folder: str) -> list[str]:
    """Cut the fat binaries under ``folder`` down to the plan's targets (``kiln prune``; nothing without a
    prune plan). Runs in the step that installed the files, so no layer ever holds the whole ones; NVIDIA's
    libraries are never modified (prune.py only reports them)."""
    if plan.prune is None:
        return []
    return [f"{VENV}/bin/python -B {PRUNE_DIR}/prune.py {plan.prune.args} {folder}"]


def torch_folder(plan: BuildPlan) -> str:
    return f"{VENV}/lib/python{plan.python}/site-packages/torch"


#: touched before an install whose files are then collected (``collect_added``)
MARK = "/tmp/kiln-mark"


def touch_mark() -> str:
    """Create ``MARK`` before the first install. Its mtime is ``SOURCE_DATE_EPOCH`` (it is part of a layer:
    see render/reproducible.py); its ctime, which ``collect_added`` compares against, is now."""
    return f'touch -d "@$SOURCE_DATE_EPOCH" {MARK}'


def collect_added(dest: str) -> str:
    """Copy the files of the venv changed after ``MARK`` was created (ctime against its ctime: the steps set
    mtimes back) into ``dest``: what an install added, as a folder a later stage copies with ``COPY --from``."""
    return (f"find {VENV} -newercc {MARK} ! -type d -printf '%P\\n'"
            f" | tar -C {VENV} --no-recursion -T - -cf - | tar -C {dest} -xf -")


def bind(name: str) -> str:
    return f"type=bind,source=.kiln/{name},target=/kiln/{name}"


UV_CACHE_MOUNT = "type=cache,target=/root/.cache/uv,sharing=locked"
SOURCE_MOUNTS = [
    bind("bin/uv"),
    bind("sources.sh"),
    bind("wheels"),
    UV_CACHE_MOUNT,
    f"type=secret,id={SECRET_UV},target=/run/secrets/{SECRET_UV}",
    f"type=secret,id={SECRET_CA},target=/run/secrets/{SECRET_CA}",
]
APT_MOUNTS = [
    "type=cache,target=/var/cache/apt,sharing=locked",
    "type=cache,target=/var/lib/apt/lists,sharing=locked",
]


def apt_install(packages: tuple[str, ...] | list[str]) -> list[str]:
    return run(
        APT_MOUNTS,
        [
            "rm -f /etc/apt/apt.conf.d/docker-clean",
            "apt-get update",
            "apt-get install -y --no-install-recommends " + " ".join(packages),
        ],
    )


def run_config(plan: BuildPlan, *, dev: bool = False) -> list[str]:
    """``[app]`` expose (EXPOSE) and, for the runtime, healthcheck (HEALTHCHECK); shared by the Dockerfile
    renderers. The dev image, a shell for interactive work, gets no health check."""
    lines = [f"EXPOSE {' '.join(str(p) for p in plan.app.expose)}"] if plan.app.expose else []
    hc = plan.app.healthcheck
    if hc is not None and not dev:
        # BuildKit refuses a start period of 0: none is the same
        start = f" --start-period={hc.start_period}" if hc.start_period.strip("0ms") else ""
        lines.append(f"HEALTHCHECK --interval={hc.interval} --timeout={hc.timeout}{start} --retries={hc.retries} "
                     f"CMD {json.dumps(list(hc.command))}")
    return lines


def start(plan: BuildPlan, default: str, prefix: tuple[str, ...] = ()) -> list[str]:
    """The runtime's ENTRYPOINT (exec form, when the spec sets one) and CMD: with an entrypoint the spec's
    command is its arguments (none: ``CMD []``), without one the command, else ``default``. ``prefix``: an
    entrypoint of torchkiln's own set earlier (forward compatibility's, which ends in ``exec "$@"``) that
    the spec's entrypoint runs behind."""
    if plan.app.entrypoint:
        entry = [*prefix, *plan.app.entrypoint]
        return [f"ENTRYPOINT {json.dumps(entry)}", f"CMD {json.dumps(list(plan.app.command))}"]
    return [f"CMD {json.dumps(list(plan.app.command) or [default])}"]


def dockerfile_header(plan: BuildPlan) -> list[str]:
    """The opening comment of every rendered Dockerfile."""
    return [
        *rendered_by(plan),
        "# Build with BuildKit (`kiln build`, or DOCKER_BUILDKIT=1 docker build --target runtime .).",
    ]


#: the build context's other files, the same for every Dockerfile torchkiln renders
SOURCES_SH = """\
# Sourced by the RUN steps that install packages (rendered by torchkiln).
# Package sources arrive as BuildKit secrets at build time and are never stored in a layer:
#   kiln-uv  a uv.toml naming the index URLs and wheel folders of this build
#   kiln-ca  a CA bundle (PEM) for TLS-intercepting proxies or private indexes
export UV_CACHE_DIR=/root/.cache/uv UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1 \\
    UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
if [ -f /run/secrets/kiln-uv ]; then export UV_CONFIG_FILE=/run/secrets/kiln-uv; fi
if [ -f /run/secrets/kiln-ca ]; then export SSL_CERT_FILE=/run/secrets/kiln-ca; fi
"""

DOCKERIGNORE = """\
# Rendered by torchkiln: the context holds only what the Dockerfile uses.
**/__pycache__
**/*.pyc
**/.git
"""
