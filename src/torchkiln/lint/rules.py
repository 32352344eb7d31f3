"""The lint rules: ML/CUDA Dockerfile mistakes that generic linters do not know about.

Each rule is one small function registered with :func:`rule`, carrying its id (``KLnnn``), default
severity, one-line summary, why (with its source) and a concrete fix. A rule yields
:class:`Hit` objects (line + specific message); :mod:`torchkiln.lint.check` turns them into
findings, applies configuration and inline suppressions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from torchkiln.lint.config import Severity
from torchkiln.lint.context import NGC_PYTORCH, TORCH_FAMILY, Context, Step, installs_torch, iter_commands
from torchkiln.lint.model import FileKind, Instruction, Stage, arg_pairs, env_pairs
from torchkiln.lint.shell import Install, Req, split_assignment, tokenize


@dataclass(frozen=True)
class Hit:
    line: int
    message: str
    end_line: int | None = None
    fix: str | None = None  # a fix specific to this finding (else the rule's)
    stage: str | None = None


Check = Callable[[Context], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: Severity
    summary: str
    why: str
    source: str
    fix: str
    check: Check
    applies_to: frozenset[FileKind]


RULES: dict[str, Rule] = {}


def rule(
    id: str,
    name: str,
    severity: Severity,
    summary: str,
    *,
    why: str,
    source: str,
    fix: str,
    applies_to: Iterable[FileKind] = ("dockerfile",),
) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        if id in RULES:
            raise ValueError(f"duplicate rule id {id}")
        RULES[id] = Rule(id, name, severity, summary, why, source, fix, fn, frozenset(applies_to))
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# shared helpers

_DEVEL_TAG = re.compile(r"(^|[-_.])devel([-_.]|$)", re.I)


def image_tag(image: str) -> tuple[str, str | None, str | None]:
    """``repo[:tag][@digest]`` → (repo, tag, digest)."""
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag, digest
    return image, None, digest


def _env_has(env: Mapping[str, str | None], *names: str) -> bool:
    return any(n in env and env[n] != "" for n in names)


def _tool_label(inst: Install) -> str:
    if inst.tool == "uv":
        return "uv pip " + inst.sub if "pip" in inst.command.argv[:3] else "uv " + inst.sub
    return f"{inst.tool} {inst.sub}"


def _stage_label(stage: Stage) -> str:
    return f"stage {stage.name!r}" if stage.name else f"stage #{stage.index}"


# ---------------------------------------------------------------------------------------------
# KL001


@rule(
    "KL001",
    "devel-base-in-final-stage",
    "warning",
    "The final stage is based on a CUDA devel image",
    why=(
        "devel images add the whole CUDA toolkit (nvcc, headers, static libraries) to the runtime "
        "image: several GB that a deployed model never uses, and a larger attack surface. NVIDIA's "
        "images come in base/runtime/devel flavours precisely so that devel is used to build and "
        "runtime to ship."
    ),
    source="NVIDIA CUDA container images, 'Image flavors' (hub.docker.com/r/nvidia/cuda)",
    fix=(
        "Build in a devel stage, then start the final stage FROM the matching -runtime tag and "
        "COPY --from the build stage only the venv or wheels."
    ),
)
def devel_base_in_final(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None or ctx.final is None:
        return
    base = ctx.df.base_image(ctx.final)
    if base is None:
        return
    _, tag, _ = image_tag(base)
    if tag and _DEVEL_TAG.search(tag):
        runtime = base.replace("cudnn-devel", "cudnn-runtime").replace("devel", "runtime")
        via = "" if ctx.final.parent is None else f" (through {ctx.final_chain[0].label!r})"
        yield Hit(
            ctx.final.line,
            f"final {_stage_label(ctx.final)} is based on {base}{via}: the CUDA toolkit ships in the image",
            fix=f"Keep {base} for a build stage and start the final stage FROM {runtime}; COPY --from "
            "the build stage only what runs (the venv, the wheels).",
            stage=ctx.final.label,
        )


# ---------------------------------------------------------------------------------------------
# KL002


def _removed_later(step: Step, inst: Install, path: str | None) -> bool:
    """Whether a later command of the same RUN deletes ``path`` (a cache folder that never reaches the layer)."""
    if not path:
        return False
    path = path.rstrip("/")
    later = False
    for cmd, _, _ in step.commands:
        if cmd is inst.command:
            later = True
        elif later and cmd.name == "rm" and any(w.text.rstrip("/") == path for w in cmd.words[1:]):
            return True
    return False


def _cache_ok(inst: Install, step: Step) -> bool:
    env = {**inst.env, **inst.command.assigned()}
    targets = step.cache_targets()
    if inst.tool == "pip":
        if inst.has("--no-cache-dir") or _env_has(env, "PIP_NO_CACHE_DIR"):
            return True
        cache_dir = (inst.values("--cache-dir") or (env.get("PIP_CACHE_DIR"),))[-1]
        return _removed_later(step, inst, cache_dir) or any(
            t.rstrip("/").endswith(("/.cache/pip", "/.cache")) or (cache_dir and t.rstrip("/") == cache_dir.rstrip("/"))
            for t in targets
        )
    if inst.tool == "uv":
        if inst.has("--no-cache") or _env_has(env, "UV_NO_CACHE"):
            return True
        cache_dir = (inst.values("--cache-dir") or (env.get("UV_CACHE_DIR"),))[-1]
        return _removed_later(step, inst, cache_dir) or any(
            t.rstrip("/").endswith(("/.cache/uv", "/.cache")) or (cache_dir and t.rstrip("/") == cache_dir.rstrip("/"))
            for t in targets
        )
    return True


@rule(
    "KL002",
    "pip-uv-cache-in-layer",
    "warning",
    "pip/uv install without a cache mount or --no-cache-dir",
    why=(
        "pip and uv keep every downloaded wheel in their cache (~/.cache/pip, ~/.cache/uv). For a "
        "CUDA torch set that is several GB written into the layer, doubling the install's size in "
        "the final image. A BuildKit cache mount keeps the cache out of the image and reuses it "
        "across builds; --no-cache-dir / --no-cache simply drops it."
    ),
    source=(
        "pip docs 'Caching'; uv docs 'Using uv in Docker: Caching' (docs.astral.sh/uv/guides/integration/"
        "docker/); Docker docs 'Use cache mounts' (docs.docker.com/build/cache/optimize/)"
    ),
    fix=(
        "RUN --mount=type=cache,target=/root/.cache/pip pip install ... (uv: target=/root/.cache/uv), "
        "or add --no-cache-dir (uv: --no-cache)."
    ),
)
def pip_cache_in_layer(ctx: Context) -> Iterator[Hit]:
    for step in ctx.steps:
        if not ctx.in_final_chain(step.stage):
            continue
        for inst in step.installs:
            if inst.tool not in ("pip", "uv") or inst.sub == "download" or _cache_ok(inst, step):
                continue
            tool = _tool_label(inst)
            target = "/root/.cache/pip" if inst.tool == "pip" else "/root/.cache/uv"
            flag = "--no-cache-dir" if inst.tool == "pip" else "--no-cache"
            yield Hit(
                inst.line,
                f"{tool} in {_stage_label(step.stage)} keeps its download cache in a layer of the final image",
                fix=f"Add --mount=type=cache,target={target} to this RUN (or pass {flag}).",
                stage=step.stage.label,
            )


# ---------------------------------------------------------------------------------------------
# KL003


@rule(
    "KL003",
    "apt-lists-not-removed",
    "warning",
    "apt-get install without removing /var/lib/apt/lists in the same RUN",
    why=(
        "apt-get update downloads package lists (tens of MB) into /var/lib/apt/lists. Removing them "
        "in a later RUN does not shrink the image: the earlier layer keeps them. They must be removed "
        "in the RUN that installs, or kept out of the layer with a cache mount."
    ),
    source="Docker docs 'Building best practices: apt-get' (docs.docker.com/build/building/best-practices/)",
    fix=(
        "End the RUN with `&& rm -rf /var/lib/apt/lists/*`, or mount "
        "--mount=type=cache,target=/var/lib/apt,sharing=locked (and /var/cache/apt)."
    ),
)
def apt_lists(ctx: Context) -> Iterator[Hit]:
    for step in ctx.steps:
        if not ctx.in_final_chain(step.stage):
            continue
        apt = [i for i in step.installs if i.tool == "apt"]
        if not apt:
            continue
        if any(t.rstrip("/") in ("/var/lib/apt", "/var/lib/apt/lists") for t in step.cache_targets()):
            continue
        cleaned = any(
            cmd.name == "rm" and any(w.text.startswith("/var/lib/apt/lists") for w in cmd.words[1:])
            for cmd, _, _ in step.commands
        )
        if not cleaned:
            yield Hit(
                apt[0].line,
                f"apt-get install in {_stage_label(step.stage)} leaves /var/lib/apt/lists in the layer",
                stage=step.stage.label,
            )


# ---------------------------------------------------------------------------------------------
# KL004

_WHOLE_CONTEXT = {".", "./", "*", "./*", "./."}


@rule(
    "KL004",
    "copy-context-before-install",
    "warning",
    "COPY of the whole build context before dependency installs",
    why=(
        "Every change to any file in the context invalidates the COPY layer and every layer after "
        "it, so a one-line code change re-downloads and reinstalls all dependencies (for torch and "
        "CUDA extensions: many minutes and GB). Copy only the dependency manifests first, install, "
        "then copy the code."
    ),
    source=(
        "Docker docs 'Optimize cache usage: order your layers' (docs.docker.com/build/cache/optimize/); "
        "replicate/cog#1004"
    ),
    fix=(
        "COPY requirements.txt (or pyproject.toml + uv.lock) first, RUN the install, then COPY . "
        "(with uv: `uv sync --no-install-project` before copying the code)."
    ),
)
def copy_before_install(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None:
        return
    steps = {s.ins.line: s for s in ctx.steps}
    for stage in ctx.df.stages:
        copy_at: Instruction | None = None
        tools_before: set[str] = set()
        for anc in ctx.df.chain(stage)[:-1]:
            for ins in anc.instructions:
                if ins.line in steps:
                    tools_before |= {i.tool for i in steps[ins.line].installs}
        for ins in stage.instructions:
            if ins.keyword in ("COPY", "ADD") and not ins.flag_values("from") and not ins.heredocs:
                if copy_at is None and any(a in _WHOLE_CONTEXT for a in ins.args[:-1]):
                    copy_at = ins
                continue
            if ins.line not in steps:
                continue
            for inst in steps[ins.line].installs:
                if copy_at is not None and _is_dependency_install(inst, tools_before):
                    yield Hit(
                        copy_at.line,
                        f"{copy_at.keyword} {' '.join(copy_at.args)} in {_stage_label(stage)} comes before the "
                        f"{_tool_label(inst)} on line {inst.line}: any code change reinstalls the dependencies",
                        stage=stage.label,
                    )
                    copy_at = None
                    break
                tools_before.add(inst.tool)


def _is_dependency_install(inst: Install, tools_before: set[str]) -> bool:
    if inst.tool in ("apt", "conda"):
        return True
    if inst.tool not in ("pip", "uv"):
        return False
    if inst.has("--requirement") or any(r.kind in ("name", "vcs", "url", "wheel") for r in inst.reqs):
        return True
    # installing the project itself (`pip install .`, `uv sync`): fine when its dependencies
    # were installed before the COPY, or when it installs without dependencies
    if inst.has("--no-deps"):
        return False
    return inst.tool not in tools_before


# ---------------------------------------------------------------------------------------------
# KL005

_ROOT_USER = re.compile(r"^(root|0)(:(root|0))?$")
_NONROOT_BASE = re.compile(r"nonroot|distroless.*:nonroot|^cgr\.dev/", re.I)


@rule(
    "KL005",
    "final-stage-runs-as-root",
    "warning",
    "The final stage runs as root",
    why=(
        "A process running as root in the container is root on the host's files it can reach "
        "(mounted datasets, checkpoints, the model cache) and turns any container escape into a root "
        "compromise. Model servers and training jobs need no root."
    ),
    source=(
        "Docker docs 'Building best practices: USER'; CIS Docker Benchmark 4.1 ('Ensure that a user "
        "for the container has been created')"
    ),
    fix=(
        "Create a user in the final stage and switch to it: `RUN useradd --create-home --uid 1000 app` then `USER app`."
    ),
)
def runs_as_root(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None or ctx.final is None:
        return
    last: Instruction | None = None
    for st in ctx.final_chain:
        for ins in st.instructions:
            if ins.keyword == "USER":
                last = ins
    if last is None:
        base = ctx.df.base_image(ctx.final)
        if base is not None and _NONROOT_BASE.search(base):
            return
        yield Hit(
            ctx.final.line,
            f"final {_stage_label(ctx.final)} sets no USER: the container runs as root",
            stage=ctx.final.label,
        )
        return
    user = last.args[0] if last.args else ""
    if _ROOT_USER.match(user):
        yield Hit(last.line, f"final {_stage_label(ctx.final)} switches to USER {user}", stage=ctx.final.label)


# ---------------------------------------------------------------------------------------------
# KL006 / KL019

_SECRET_WORDS = {"TOKEN", "PASSWORD", "PASSWD", "SECRET", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
_SECRET_PAIRS = {("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY"), ("AUTH", "KEY")}
_NOT_SECRET_SUFFIX = {"FILE", "PATH", "DIR", "ID", "TYPE", "LENGTH", "LEN", "NAME", "URL", "ENDPOINT", "HOST"}
TOKEN_SHAPES = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|npm_[A-Za-z0-9]{30,}"
    r"|pypi-[A-Za-z0-9_-]{50,}|nvapi-[A-Za-z0-9_-]{30,})\b"
)
_URL_USERINFO = re.compile(r"\b[a-z][a-z0-9+.-]*://([^/\s@'\"]+)@", re.I)


def secret_name(name: str) -> bool:
    parts = [p for p in name.upper().split("_") if p]
    if not parts or parts[-1] in _NOT_SECRET_SUFFIX:
        return False
    if any(p in _SECRET_WORDS for p in parts):
        return True
    return any((a, b) in _SECRET_PAIRS for a, b in zip(parts, parts[1:], strict=False))


def url_credentials(text: str) -> str | None:
    """A literal password or token in a URL's userinfo (``https://user:pass@host``), or None."""
    for m in _URL_USERINFO.finditer(text):
        info = m.group(1)
        if "$" in info:
            continue  # filled from a variable: see where the variable comes from
        user, sep, password = info.partition(":")
        if (sep and password) or TOKEN_SHAPES.search(user) or len(user) >= 32:
            return info
    return None


def _flag_value(value: str | None) -> bool:
    """A switch, not a secret: SCCACHE_S3_NO_CREDENTIALS=0, USE_AUTH_TOKEN=false."""
    return value is not None and value.strip().lower() in ("0", "1", "true", "false", "yes", "no", "on", "off")


def _mask(secret: str) -> str:
    return secret[:4] + "…" if len(secret) > 6 else "…"


@rule(
    "KL006",
    "secret-in-arg-env",
    "error",
    "A secret is passed through ARG or ENV",
    why=(
        "ENV values are stored in the image config, and ARG values used by a RUN are recorded in "
        "the image history (`docker history`): anyone who can pull the image can read the token. "
        "BuildKit secret mounts give a build step the secret without storing it anywhere."
    ),
    source=(
        "Docker build check SecretsUsedInArgOrEnv (docs.docker.com/reference/build-checks/"
        "secrets-used-in-arg-or-env/); Docker docs 'Build secrets'"
    ),
    fix=(
        "Pass it as a build secret: `RUN --mount=type=secret,id=hf_token,env=HF_TOKEN ...` and "
        "`docker build --secret id=hf_token,env=HF_TOKEN`; for a package index, mount a pip.conf/uv.toml "
        "as a secret instead of putting credentials in the URL."
    ),
)
def secrets_in_arg_env(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None:
        return
    for ins in ctx.df.instructions():
        if ins.keyword == "ARG":
            pairs: list[tuple[str, str | None]] = list(arg_pairs(ins))
        elif ins.keyword == "ENV":
            pairs = list(env_pairs(ins))
        else:
            continue
        for name, value in pairs:
            if secret_name(name) and not _flag_value(value):
                yield Hit(ins.line, f"{ins.keyword} {name} looks like a secret and is stored in the image")
                continue
            if value:
                cred = url_credentials(value)
                if cred:
                    yield Hit(
                        ins.line,
                        f"{ins.keyword} {name} holds a URL with credentials ({_mask(cred)}@…), stored in the image",
                    )
                elif TOKEN_SHAPES.search(value):
                    tok = TOKEN_SHAPES.search(value)
                    assert tok is not None
                    yield Hit(ins.line, f"{ins.keyword} {name} holds a token-shaped value ({_mask(tok.group(0))})")


@rule(
    "KL019",
    "credentials-in-command-url",
    "error",
    "A RUN command line contains a URL with a literal password or token",
    why=(
        "The text of every RUN is stored in the image history, so a token written into an index URL "
        "or a git clone URL is readable by anyone who can pull the image (and it lands in CI logs)."
    ),
    source="Docker docs 'Build secrets' (docs.docker.com/build/building/secrets/); pip docs 'Authentication'",
    fix=(
        "Mount the credentials as a secret (`--mount=type=secret,id=netrc,target=/root/.netrc`, or "
        "`env=TOKEN` and write `https://user:${TOKEN}@...`), never a literal in the Dockerfile."
    ),
    applies_to=("dockerfile", "script", "apptainer"),
)
def credentials_in_url(ctx: Context) -> Iterator[Hit]:
    seen: set[int] = set()
    for cmd, _ in iter_commands(ctx):
        for w in cmd.words:
            cred = url_credentials(w.text)
            if cred and cmd.line not in seen:
                seen.add(cmd.line)
                yield Hit(cmd.line, f"`{cmd.name}` is given a URL with credentials ({_mask(cred)}@…)")


# ---------------------------------------------------------------------------------------------
# KL007

_FAST_MATH = re.compile(r"(?<![\w-])-{1,2}use[_-]fast[_-]math\b")


@rule(
    "KL007",
    "fast-math-in-training-image",
    "warning",
    "--use_fast_math in a training image",
    why=(
        "nvcc's --use_fast_math implies --ftz=true --prec-div=false --prec-sqrt=false --fmad=true: "
        "denormals flush to zero and division/sqrt become approximate. Inference kernels may accept "
        "that; in training, gradients and optimizer states are small numbers and the error "
        "accumulates over millions of steps, so loss curves diverge from the reference."
    ),
    source="NVIDIA CUDA Compiler Driver NVCC documentation, option --use_fast_math",
    fix=(
        "Drop --use_fast_math from NVCC_FLAGS/NVCC_APPEND_FLAGS/CMAKE_CUDA_FLAGS for training builds "
        "(keep it, if at all, for an inference-only image; set `training = false` in the lint config then)."
    ),
)
def fast_math(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None or not ctx.is_training:
        return
    evidence = ctx.training_evidence or "the lint config says training = true"
    for n, raw in enumerate(ctx.df.lines, start=1):
        if raw.lstrip().startswith("#"):
            continue
        if _FAST_MATH.search(raw):
            yield Hit(n, f"--use_fast_math in a training image ({evidence})")


# ---------------------------------------------------------------------------------------------
# CUDA extensions: KL008 .. KL011

#: sdists on the package index that compile CUDA code against the installed torch
_SDIST_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "flash-attn": ("FLASH_ATTN_CUDA_ARCHS",),  # its setup.py passes its own -gencode flags
    "mamba-ssm": ("TORCH_CUDA_ARCH_LIST",),
    "causal-conv1d": ("TORCH_CUDA_ARCH_LIST",),
    "transformer-engine": ("NVTE_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"),
    "transformer-engine-torch": ("NVTE_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"),
    "grouped-gemm": ("TORCH_CUDA_ARCH_LIST",),
    "torch-scatter": ("TORCH_CUDA_ARCH_LIST",),
    "torch-sparse": ("TORCH_CUDA_ARCH_LIST",),
    "torch-cluster": ("TORCH_CUDA_ARCH_LIST",),
    "torch-spline-conv": ("TORCH_CUDA_ARCH_LIST",),
}
#: source trees (git URLs, checkouts) that are CUDA extensions
_EXTENSION_REPOS = re.compile(
    r"(apex|flash[-_]attention|flash[-_]attn|xformers|mamba|causal[-_]conv1d|pytorch3d|detectron2|nvdiffrast"
    r"|tiny[-_]cuda[-_]nn|vllm|transformerengine|natten|gsplat|deepspeed|grouped[-_]gemm|fused[-_]\w+)",
    re.I,
)
_CUDA_SIGNALS = re.compile(r"^(FORCE_CUDA|\w*_CUDA_EXT|WITH_CUDA|BUILD_CUDA\w*)$")


@dataclass(frozen=True)
class ExtBuild:
    step: Step
    install: Install
    label: str
    arch_vars: tuple[str, ...]
    env: Mapping[str, str | None]
    cwd: str | None


def _env_true(env: Mapping[str, str | None], name: str) -> bool:
    v = env.get(name)
    return v is not None and v.strip().lower() in ("1", "true", "yes", "on")


def _cuda_signal(env: Mapping[str, str | None], inst: Install) -> bool:
    if any(_CUDA_SIGNALS.match(k) and _env_true(env, k) for k in env):
        return True
    opts = " ".join(inst.values("--config-settings", "--global-option", "--build-option", "--install-option"))
    argv = " ".join(inst.command.argv)
    return "--cuda_ext" in opts or "--cuda_ext" in argv or "TORCH_CUDA_ARCH_LIST" in env


def extension_builds(ctx: Context) -> Iterator[ExtBuild]:
    """Every install/build that compiles a CUDA extension against torch."""
    for step in ctx.steps:
        for cmd, env, cwd in step.commands:
            inst = next((i for i in step.installs if i.command is cmd), None)
            if inst is None:
                continue
            label = _extension_label(inst, env, cwd)
            if label is None:
                continue
            arch_vars = _SDIST_EXTENSIONS.get(label, ("TORCH_CUDA_ARCH_LIST",))
            yield ExtBuild(step, inst, label, arch_vars, env, cwd)


def _extension_label(inst: Install, env: Mapping[str, str | None], cwd: str | None) -> str | None:
    if inst.tool == "setup.py":
        where = cwd or ""
        m = _EXTENSION_REPOS.search(where.rsplit("/", 1)[-1]) if where else None
        if m:
            return m.group(1).lower()
        return f"the setup.py build in {where or 'the working directory'}" if _cuda_signal(env, inst) else None
    if inst.tool not in ("pip", "uv") or inst.sub not in ("install", "wheel"):
        return None
    no_binary = " ".join(inst.values("--no-binary"))
    for r in inst.reqs:
        if r.kind == "name" and r.name:
            if r.name in _SDIST_EXTENSIONS:
                if r.name.startswith("torch-") and inst.has("--find-links"):
                    continue  # PyG's prebuilt wheels
                return r.name
            if r.name == "deepspeed" and any(k.startswith("DS_BUILD_") and _env_true(env, k) for k in env):
                return "deepspeed"
            if r.name == "xformers" and ("xformers" in no_binary or ":all:" in no_binary):
                return "xformers"
        elif r.kind in ("vcs", "url", "path"):
            where = r.text if r.kind != "path" or r.text not in (".", "./") else (cwd or "")
            m = _EXTENSION_REPOS.search(where)
            if m and not (m.group(1).lower() == "deepspeed" and not any(k.startswith("DS_BUILD_") for k in env)):
                return m.group(1).lower()
            if r.kind == "path" and _cuda_signal(env, inst):
                return f"{r.text} (CUDA extension)"
    return None


def _arch_value(env: Mapping[str, str | None], names: Iterable[str]) -> tuple[str, str | None] | None:
    for n in names:
        if n in env and env[n] != "":
            return n, env[n]
    return None


@rule(
    "KL008",
    "extension-without-arch-list",
    "error",
    "A CUDA extension is built without TORCH_CUDA_ARCH_LIST",
    why=(
        "Without TORCH_CUDA_ARCH_LIST, torch.utils.cpp_extension derives the architectures from the "
        "GPUs it can see. `docker build` sees none, so the build fails or falls back to whatever "
        "default the package or the base image has (on an NGC base the image's own preset list "
        "leaks in), not the GPUs you deploy on."
    ),
    source=("pytorch torch/utils/cpp_extension.py _get_cuda_arch_flags; pytorch/vision#1566; SHI-Labs/NATTEN#28"),
    fix=(
        "Set the list of your target GPUs before the build, e.g. "
        '`ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"` (or `TORCH_CUDA_ARCH_LIST=... pip install ...`).'
    ),
)
def ext_arch_list(ctx: Context) -> Iterator[Hit]:
    for b in extension_builds(ctx):
        if b.label == "flash-attn":
            continue  # flash-attn ignores TORCH_CUDA_ARCH_LIST: KL020
        got = _arch_value(b.env, b.arch_vars)
        if got is not None and (got[1] or "").strip().lower() != "native":
            continue
        names = " or ".join(b.arch_vars)
        why = "is 'native', which needs a visible GPU" if got else "is not set"
        yield Hit(
            b.install.line,
            f"{b.label} is compiled but {names} {why}: the architectures are guessed at build time",
            stage=b.step.stage.label,
        )


@rule(
    "KL020",
    "flash-attn-without-arch-list",
    "warning",
    "flash-attn is built without FLASH_ATTN_CUDA_ARCHS",
    why=(
        "flash-attn's setup.py passes its own -gencode flags, so torch ignores TORCH_CUDA_ARCH_LIST "
        "for it; it reads FLASH_ATTN_CUDA_ARCHS instead (default 80;90;100;120 in 2.8). Without it "
        "every default architecture is compiled: hours of nvcc for GPUs you may not have, and no "
        "kernels for an architecture outside the default."
    ),
    source="Dao-AILab/flash-attention setup.py (cc_flag / FLASH_ATTN_CUDA_ARCHS), flash-attention#1776",
    fix='Set FLASH_ATTN_CUDA_ARCHS to your targets without dots, e.g. `ENV FLASH_ATTN_CUDA_ARCHS="80;90"`.',
)
def flash_attn_archs(ctx: Context) -> Iterator[Hit]:
    for b in extension_builds(ctx):
        if b.label != "flash-attn" or _env_has(b.env, "FLASH_ATTN_CUDA_ARCHS"):
            continue
        extra = (
            " (TORCH_CUDA_ARCH_LIST is set, but flash-attn ignores it)"
            if _env_has(b.env, "TORCH_CUDA_ARCH_LIST")
            else ""
        )
        yield Hit(
            b.install.line,
            f"flash-attn is compiled for its default architectures: FLASH_ATTN_CUDA_ARCHS is not set{extra}",
            stage=b.step.stage.label,
        )


@rule(
    "KL009",
    "extension-with-build-isolation",
    "error",
    "A CUDA extension is installed with pip/uv build isolation",
    why=(
        "With build isolation pip and uv build the package in a fresh environment without your "
        "torch: the build fails with \"No module named 'torch'\", or, where the package declares "
        "torch as a build dependency, compiles against a different torch than the one that runs "
        "it (undefined symbols at import)."
    ),
    source=(
        "Dao-AILab/flash-attention README ('pip install flash-attn --no-build-isolation'), "
        "flash-attention#1421; astral-sh/uv#6437"
    ),
    fix="Install torch first, then the extension with --no-build-isolation (uv pip install --no-build-isolation ...).",
)
def ext_isolation(ctx: Context) -> Iterator[Hit]:
    for b in extension_builds(ctx):
        inst = b.install
        if inst.tool not in ("pip", "uv"):
            continue
        if inst.has("--no-build-isolation") or _env_has(b.env, "PIP_NO_BUILD_ISOLATION", "UV_NO_BUILD_ISOLATION"):
            continue
        if inst.tool == "uv" and inst.values("--no-build-isolation-package"):
            continue
        yield Hit(
            inst.line,
            f"{b.label} is built in an isolated environment without your torch (no --no-build-isolation)",
            stage=b.step.stage.label,
        )


@rule(
    "KL010",
    "extension-before-torch",
    "error",
    "A CUDA extension is built before torch is installed",
    why=(
        "CUDA extensions import torch in their setup.py and compile against its headers and ABI. "
        "Installing one before torch (or in the same pip command as torch) fails, or builds against "
        "whatever torch the resolver picks, not the one the image runs."
    ),
    source="Dao-AILab/flash-attention README (install order); astral-sh/uv#6437; pytorch/pytorch#150733",
    fix="Install torch (pinned, from the right CUDA index) in an earlier RUN, then build the extension.",
)
def ext_before_torch(ctx: Context) -> Iterator[Hit]:
    for b in extension_builds(ctx):
        same = b.install.names & TORCH_FAMILY
        if same:
            yield Hit(
                b.install.line,
                f"{b.label} is built in the same command that installs {', '.join(sorted(same))}",
                fix="Split it: install torch in one command (or RUN), then the extension with --no-build-isolation.",
                stage=b.step.stage.label,
            )
            continue
        state = ctx.torch_before(b.step)
        if state != "no":
            continue
        earlier = False
        for inst in b.step.installs:
            if inst is b.install:
                break
            if installs_torch(inst) != "no":
                earlier = True
        if not earlier:
            yield Hit(
                b.install.line,
                f"{b.label} is built but nothing before it installs torch",
                stage=b.step.stage.label,
            )


@rule(
    "KL011",
    "extension-without-max-jobs",
    "warning",
    "A CUDA extension is built without MAX_JOBS",
    why=(
        "torch's cpp_extension runs ninja with one job per CPU; each nvcc job of flash-attn-sized "
        "kernels takes several GB of RAM, so a build on a many-core machine gets OOM-killed (or the "
        "docker daemon dies) after a long time. MAX_JOBS caps the parallel jobs."
    ),
    source="Dao-AILab/flash-attention README (MAX_JOBS); pytorch torch/utils/cpp_extension.py (MAX_JOBS)",
    fix="Set MAX_JOBS for the build, sized to memory: `MAX_JOBS=4 pip install --no-build-isolation ...`.",
)
def ext_max_jobs(ctx: Context) -> Iterator[Hit]:
    for b in extension_builds(ctx):
        if _env_has(b.env, "MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL"):
            continue
        yield Hit(
            b.install.line,
            f"{b.label} is compiled with no MAX_JOBS: ninja starts one nvcc job per CPU",
            stage=b.step.stage.label,
        )


# ---------------------------------------------------------------------------------------------
# TORCH_CUDA_ARCH_LIST values: KL012, KL018

#: from torch/utils/cpp_extension.py (_get_cuda_arch_flags), torch 2.13; order matters
NAMED_ARCHES: tuple[tuple[str, str], ...] = (
    ("Kepler+Tesla", "3.7"),
    ("Kepler", "3.5+PTX"),
    ("Maxwell+Tegra", "5.3"),
    ("Maxwell", "5.0;5.2+PTX"),
    ("Pascal", "6.0;6.1+PTX"),
    ("Volta+Tegra", "7.2"),
    ("Volta", "7.0+PTX"),
    ("Turing", "7.5+PTX"),
    ("Ampere+Tegra", "8.7"),
    ("Ampere", "8.0;8.6+PTX"),
    ("Ada", "8.9+PTX"),
    ("Hopper", "9.0+PTX"),
    ("Blackwell+Tegra", "11.0"),
    ("Blackwell", "10.0;10.3;12.0;12.1+PTX"),
)
SUPPORTED_ARCHES = (
    "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9",
    "9.0", "9.0a", "10.0", "10.0a", "11.0", "11.0a", "10.3", "10.3a", "12.0", "12.0a", "12.1", "12.1a",
)  # fmt: skip
VALID_ARCH_STRINGS = frozenset(SUPPORTED_ARCHES) | {a + "+PTX" for a in SUPPORTED_ARCHES}


def expand_arch_list(value: str) -> list[str]:
    """The items torch would check, exactly as ``_get_cuda_arch_flags`` computes them."""
    text = value.replace(" ", ";")
    for named, archs in NAMED_ARCHES:
        text = text.replace(named, archs)
    return text.split(";")


@dataclass(frozen=True)
class ArchListDef:
    line: int
    value: str
    where: str


def arch_list_definitions(ctx: Context) -> Iterator[ArchListDef]:
    if ctx.df is not None:
        for ins in ctx.df.instructions():
            pairs: list[tuple[str, str | None]] = []
            if ins.keyword == "ENV":
                pairs = list(env_pairs(ins))
            elif ins.keyword == "ARG":
                pairs = list(arg_pairs(ins))
            for k, v in pairs:
                if k == "TORCH_CUDA_ARCH_LIST" and v is not None and "$" not in v:
                    yield ArchListDef(ins.line, v, ins.keyword)
    for cmd, _ in iter_commands(ctx):
        words = list(cmd.assignments)
        if cmd.name in ("export", "declare", "env"):
            words += list(cmd.words[1:])
        for w in words:
            pair = split_assignment(w.text)
            if pair and pair[0] == "TORCH_CUDA_ARCH_LIST" and "$" not in pair[1]:
                line = cmd.snippet.file_line(w.index) if cmd.snippet is not None else cmd.line
                yield ArchListDef(line, pair[1], "shell")


@rule(
    "KL012",
    "arch-list-without-ptx",
    "info",
    "TORCH_CUDA_ARCH_LIST has no +PTX entry",
    why=(
        "Without PTX the compiled kernels run only on the listed architectures (and same-major newer "
        "minors): a GPU of a newer major generation fails with 'no kernel image is available'. "
        "+PTX on the newest entry lets the driver JIT-compile for future GPUs. Note that recent "
        "torch cu13x wheels themselves ship no PTX (measured for 2.14.1)."
    ),
    source=(
        "NVIDIA CUDA compatibility guide (PTX JIT); pytorch torch/utils/cpp_extension.py (+PTX); pytorch/pytorch#150733"
    ),
    fix='Add +PTX to the newest architecture, e.g. TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX".',
    applies_to=("dockerfile", "script", "apptainer"),
)
def arch_list_ptx(ctx: Context) -> Iterator[Hit]:
    cut = {(line, value) for line, name, value, _ in cut_lists(ctx) if name == "TORCH_CUDA_ARCH_LIST"}
    for d in arch_list_definitions(ctx):
        if (d.line, d.value) in cut:
            continue  # KL014 reports the real problem
        items = expand_arch_list(d.value)
        if any(i not in VALID_ARCH_STRINGS for i in items):
            continue  # KL018 reports it
        # PTX of an arch-specific target (9.0a+PTX = compute_90a) runs only on that exact GPU
        if any(i.endswith("+PTX") and not i[:-4].endswith("a") for i in items):
            continue
        newest = max(items, key=_arch_key)
        plain = newest[:-4] if newest.endswith("+PTX") else newest
        plain = plain.rstrip("a")
        if plain in items:
            fixed = ";".join(i + "+PTX" if i == plain else i for i in items)
        else:
            fixed = ";".join([*items, plain + "+PTX"])
        yield Hit(
            d.line,
            f"TORCH_CUDA_ARCH_LIST={d.value!r} has no forward-compatible PTX: GPUs newer than {plain} "
            "cannot run these kernels",
            fix=f'TORCH_CUDA_ARCH_LIST="{fixed}"',
        )


def _arch_key(item: str) -> tuple[int, int]:
    major, _, minor = item.split("+")[0].rstrip("a").partition(".")
    return int(major), int(minor or 0)


@rule(
    "KL018",
    "invalid-arch-list",
    "error",
    "TORCH_CUDA_ARCH_LIST has an entry torch rejects",
    why=(
        "torch.utils.cpp_extension accepts only X.Y entries it knows (optionally with 'a' and +PTX, "
        "upper case), separated by ';' or spaces, and the architecture names Ampere, Hopper, ...; "
        "anything else ('sm_80', '80', '8.0+ptx', an empty entry from a trailing ';') raises "
        "ValueError('Unknown CUDA arch ...') in the middle of the build."
    ),
    source="pytorch torch/utils/cpp_extension.py _get_cuda_arch_flags (valid_arch_strings), torch 2.13",
    fix="Write entries as X.Y with ';' between them, +PTX in upper case: TORCH_CUDA_ARCH_LIST=\"8.0;8.6;9.0+PTX\".",
    applies_to=("dockerfile", "script", "apptainer"),
)
def arch_list_invalid(ctx: Context) -> Iterator[Hit]:
    for d in arch_list_definitions(ctx):
        if d.value.strip().lower() == "native" or not d.value.strip():
            continue
        bad = [i for i in expand_arch_list(d.value) if i not in VALID_ARCH_STRINGS]
        if bad:
            shown = ", ".join(repr(b) for b in bad[:3])
            yield Hit(d.line, f"TORCH_CUDA_ARCH_LIST={d.value!r}: torch rejects {shown}")


# ---------------------------------------------------------------------------------------------
# KL013


@rule(
    "KL013",
    "torch-over-ngc-build",
    "error",
    "torch is installed on an NGC PyTorch base without NGC's constraints",
    why=(
        "The NGC PyTorch image ships NVIDIA's own torch build (with its CUDA, cuDNN, NCCL and "
        "patches). Installing torch over it replaces that build with a generic wheel and can pull a "
        "second CUDA stack. From 25.03 the image pins its packages in /etc/pip/constraint.txt for "
        "pip; uv ignores pip's configuration, and older releases have no constraints at all."
    ),
    source=("NVIDIA PyTorch container release notes (25.03+: /etc/pip/constraint.txt); astral-sh/uv#2560"),
    fix=(
        "Do not install torch on an NGC base; for other packages pass the constraints: "
        "`pip install -c /etc/pip/constraint.txt ...` (uv: `uv pip install --constraint "
        "/etc/pip/constraint.txt ...` or UV_CONSTRAINT)."
    ),
)
def torch_on_ngc(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None:
        return
    for step in ctx.steps:
        base = ctx.df.base_image(step.stage)
        if base is None or not NGC_PYTORCH.match(base):
            continue
        for inst in step.installs:
            if inst.tool not in ("pip", "uv") or inst.sub not in ("install", "sync"):
                continue
            torch = sorted(inst.names & TORCH_FAMILY)
            if not torch:
                continue
            if inst.has("--constraint", "--constraints"):
                continue
            env_var = "PIP_CONSTRAINT" if inst.tool == "pip" else "UV_CONSTRAINT"
            if _env_has(inst.env, env_var):
                continue
            yield Hit(
                inst.line,
                f"{_tool_label(inst)} puts {', '.join(torch)} over the NGC build in {base} without a constraints file",
                stage=step.stage.label,
            )


# ---------------------------------------------------------------------------------------------
# KL014

_LIST_VARS = frozenset(
    {"TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS", "CMAKE_CUDA_ARCHITECTURES", "NVTE_CUDA_ARCHS", "CUDA_ARCH_LIST"}
)
_LIST_ITEM = re.compile(r"^(\d+(\.\d+)?[af]?(\+PTX)?|sm_\d+[af]?|compute_\d+)$", re.I)


@rule(
    "KL014",
    "unquoted-semicolon-list",
    "error",
    "An unquoted ';' list in a shell assignment",
    why=(
        "In a shell, ';' ends a command: `export TORCH_CUDA_ARCH_LIST=8.0;9.0` sets the variable to "
        "8.0 and then runs a command named 9.0 ('not found'). Where that error is not fatal "
        "(Apptainer %environment, a script without `set -e`, a later `;` or `|| true`) the build goes "
        "on and compiles for the first architecture only. Dockerfile ENV is not a shell and is fine; "
        "RUN lines, scripts and Apptainer %post/%environment are shells."
    ),
    source="GNU Bash manual, 'Lists of Commands'; observed in hpccm's rendered Singularity recipes",
    fix='Quote the value: export TORCH_CUDA_ARCH_LIST="8.0;9.0".',
    applies_to=("dockerfile", "script", "apptainer"),
)
def unquoted_list(ctx: Context) -> Iterator[Hit]:
    for line, name, value, rest in cut_lists(ctx):
        yield Hit(
            line,
            f"{name}={value};{rest} is cut at ';': {name} becomes {value!r} and {rest!r} runs as a command",
            fix=f'Quote it: {name}="{value};{rest}".',
        )


def cut_lists(ctx: Context) -> Iterator[tuple[int, str, str, str]]:
    """Shell assignments cut by an unquoted ';': (line, name, value kept, next word)."""
    for sn in ctx.snippets:
        toks = tokenize(sn.text)
        for a, op, b in zip(toks, toks[1:], toks[2:], strict=False):
            if a.kind != "word" or op.kind != "op" or op.text != ";" or b.kind != "word":
                continue
            if a.end != op.start or op.end != b.start:
                continue
            pair = split_assignment(a.raw)
            if pair is None or pair[1].startswith(("'", '"')):
                continue
            name, value = pair
            if name in _LIST_VARS or (_LIST_ITEM.match(value) and _LIST_ITEM.match(b.text)):
                yield sn.file_line(a.index), name, value, b.text


# ---------------------------------------------------------------------------------------------
# KL015, KL016


@rule(
    "KL015",
    "add-remote-url",
    "warning",
    "ADD of a remote URL without --checksum",
    why=(
        "ADD <url> downloads whatever the server returns at build time: no integrity check, no "
        "pinning, and a changed file silently changes the image (CUDA installers and model weights "
        "are typical). ADD --checksum makes the build fail when the content changes."
    ),
    source="Dockerfile reference, 'ADD --checksum' (docs.docker.com/reference/dockerfile/#add---checksum)",
    fix=(
        "ADD --checksum=sha256:<digest> <url> <dest> (needs `# syntax=docker/dockerfile:1.6` or newer), "
        "or download in a RUN and verify with sha256sum -c."
    ),
)
def add_remote(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None:
        return
    for ins in ctx.df.instructions():
        if ins.keyword != "ADD" or ins.heredocs or ins.flag_values("checksum"):
            continue
        for src in ins.args[:-1]:
            if re.match(r"^https?://", src, re.I):
                yield Hit(ins.line, f"ADD {src} is downloaded without a checksum")


@rule(
    "KL016",
    "base-image-not-pinned",
    "warning",
    "A base image is untagged or uses :latest",
    why=(
        "An untagged or :latest base changes under you: a rebuild silently moves to a new CUDA, "
        "cuDNN or Python and breaks torch wheels or driver compatibility. Pin a full version tag "
        "(and a digest for reproducible builds)."
    ),
    source="Docker docs 'Building best practices: pin base image versions'; hadolint DL3006/DL3007",
    fix="Pin the tag (nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04), ideally with @sha256:<digest>.",
)
def base_not_pinned(ctx: Context) -> Iterator[Hit]:
    if ctx.df is None:
        return
    for st in ctx.df.stages:
        if st.parent is not None or st.resolved_image is None:
            continue
        image = st.resolved_image
        if image.lower() == "scratch" or "$" in image:
            continue
        _, tag, digest = image_tag(image)
        if digest:
            continue
        shown = image if image == st.image else f"{st.image} (= {image})"
        if tag is None:
            yield Hit(st.line, f"FROM {shown} has no tag (it means :latest)", stage=st.label)
        elif tag.lower() == "latest":
            yield Hit(st.line, f"FROM {shown} uses :latest", stage=st.label)


# ---------------------------------------------------------------------------------------------
# KL017


@rule(
    "KL017",
    "nvidia-docker",
    "warning",
    "nvidia-docker is used",
    why=(
        "nvidia-docker (the wrapper script and the nvidia-docker2 package) is deprecated and its "
        "repository archived; current distributions ship the NVIDIA Container Toolkit, where "
        "`docker run --gpus` (or CDI devices) exposes GPUs. Scripts calling nvidia-docker fail on "
        "new hosts."
    ),
    source=(
        "NVIDIA/nvidia-docker README (archived, superseded by the NVIDIA Container Toolkit); "
        "NVIDIA Container Toolkit install guide"
    ),
    fix="Install nvidia-container-toolkit and use `docker run --gpus all ...` (podman: `--device nvidia.com/gpu=all`).",
    applies_to=("dockerfile", "script", "apptainer"),
)
def nvidia_docker(ctx: Context) -> Iterator[Hit]:
    for cmd, _ in iter_commands(ctx):
        if cmd.name == "nvidia-docker":
            yield Hit(cmd.line, "`nvidia-docker` is deprecated: use `docker run --gpus ...`")
        elif any(w.text in ("nvidia-docker", "nvidia-docker2") for w in cmd.words[1:]) and cmd.name in (
            "apt-get", "apt", "yum", "dnf", "zypper",
        ):  # fmt: skip
            yield Hit(cmd.line, "installs the deprecated nvidia-docker2 package")


def ordered_rules() -> list[Rule]:
    return [RULES[k] for k in sorted(RULES)]


__all__ = ["RULES", "Hit", "Rule", "ordered_rules", "Req"]
