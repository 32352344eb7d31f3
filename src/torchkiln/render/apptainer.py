"""Render a BuildPlan into an Apptainer (Singularity) definition file. Pure and deterministic.

``render_apptainer`` and ``apptainer_files`` are pure (plan → text); writing them with the files
they name into a folder is ``torchkiln.building.context``'s work.

The definition is built from small pieces, one per section (header, ``%labels``, ``%help``,
``%files``, ``%environment``, ``%post``, ``%runscript``, ``%test``), and ``%post`` from one
function per install stage, in the order the Dockerfile uses:

1. ``os``          the spec's apt packages (and, only when extensions are compiled, the compilers);
2. ``venv``        a venv at ``/opt/venv`` made by uv with the plan's Python;
3. ``torch``       torch and its companions only, then ``uv pip freeze`` into the constraints file
                   ``/etc/pip/constraint.txt``, which pins the torch set for every later install;
4. ``packages``    the spec's pip packages, installed against those constraints;
5. ``extensions``  packages compiled against the installed torch: ``--no-build-isolation`` (their
                   builds import torch), the plan's ``TORCH_CUDA_ARCH_LIST`` exported for them,
                   ``MAX_JOBS`` from the memory each compile job needs, the compilers removed after;
6. ``app``         the app files into the working directory, the verify module into
                   ``/opt/kiln/verify``, and ``/kiln`` (the build-time staging folder holding uv, the
                   requirement files, wheels and package sources) deleted, so none of it is in the image.

Facts this relies on (apptainer's ``pkg/build/types/parser/deffile.go``, ``internal/pkg/build``):
a line whose first word starts with ``%`` opens a section; header values end at ``#``; ``%labels``
lines are ``key value``; ``%files`` sources are relative to the folder ``apptainer build`` runs in and
may be double-quoted; ``%post`` runs under ``/bin/sh`` with a clean environment (``--cleanenv``) and
``/`` as working directory; ``%environment`` becomes ``/.singularity.d/env/90-environment.sh``, sourced
by ``/bin/sh`` at every start; ``{{ name }}`` is build-argument syntax. The renderer refuses values
that would break any of these rules instead of emitting a definition that means something else.

Every value that reaches a shell goes through ``shlex.quote`` (``TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'``:
an unquoted ``;`` would end the ``export`` and run ``9.0+PTX`` as a command).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Literal, Protocol

from torchkiln import __version__
from torchkiln.contract import (
    CONSTRAINTS,
    KILN,
    UV,
    VENV,
    VERIFY_DIR,
    VERIFY_SCRIPT,
    VERIFY_SPEC,
    image_labels,
    sif_name,
    verify_spec,
)
from torchkiln.errors import InputError, SpecError
from torchkiln.plan import BuildPlan, ExtensionPlan
from torchkiln.render import project as proj
from torchkiln.render.instructions import drop_torch_tests, prune_files, rendered_by, torch_folder
from torchkiln.render.steps import apptainer_steps

Bootstrap = Literal["docker", "docker-daemon", "docker-archive", "oci-archive", "localimage"]
BOOTSTRAPS: tuple[Bootstrap, ...] = ("docker", "docker-daemon", "docker-archive", "oci-archive", "localimage")
#: bootstraps whose ``From:`` names an image reference (the plan's base image by default)
_REF_BOOTSTRAPS = ("docker", "docker-daemon")
#: the default bootstrap: ``From:`` is pulled from a registry by ``apptainer build`` itself
REGISTRY_BOOTSTRAP: Bootstrap = "docker"

DEFFILE = "kiln.def"
#: what ``checks.py`` exits with when no CUDA device is visible (torchkiln.errors.ExitCode.NO_GPU)
NO_GPU_EXIT = 8
#: the stage that compiles when the toolchain has an image of its own (two-stage definitions)
BUILDER = "builder"
#: the CUDA compiler wheels' venv and the CUDA_HOME made from them (both under /kiln: deleted after %post)
TOOLCHAIN_VENV = f"{KILN}/toolchain"
CUDA_HOME = f"{KILN}/cuda"
INDENT = "    "

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./@+-]+$")


class BaseSource(Protocol):
    """Where the definition's base comes from (``torchkiln.building.options.ApptainerOptions``, the
    build option, is one; None means ``Bootstrap: docker`` from the plan's base image).

    ``docker`` pulls ``source`` (default: the plan's base image) from a registry at build time. For
    offline sites: ``docker-daemon`` takes it from the local Docker daemon, ``docker-archive`` /
    ``oci-archive`` from a tar written by ``docker save`` / ``kiln export``, ``localimage`` from a
    ``.sif`` on disk; those three need ``source`` (a path, absolute or relative to the build folder).
    """

    @property
    def bootstrap(self) -> str: ...

    @property
    def source(self) -> str | None: ...

    #: the builder stage's base (two-stage definitions only): default the plan's toolchain image
    @property
    def builder_source(self) -> str | None: ...


def takes_files(bootstrap: str) -> bool:
    """Whether a bootstrap's ``From:`` is a file path (not an image reference)."""
    return bootstrap not in _REF_BOOTSTRAPS


def builder_from_value(plan: BuildPlan, options: BaseSource | None) -> str:
    """The builder stage's ``From:`` (two-stage definitions)."""
    image = _builder_image(plan)
    bootstrap = "docker" if options is None else options.bootstrap
    value = None if options is None else options.builder_source
    if value is None:
        if bootstrap not in _REF_BOOTSTRAPS:
            raise InputError(
                f"this plan compiles on {image}, and Bootstrap {bootstrap} needs that image as a file too.",
                hint=(f"Pass it with --builder-from (written by `kiln export {image} --format "
                      f"{bootstrap if bootstrap != 'localimage' else 'sif'} -o builder.tar`)."),
            )
        value = image
    return _from_checked(value)


def from_value(plan: BuildPlan, options: BaseSource | None) -> str:
    """The final stage's ``From:``: ``options.source``, or the plan's base image for a reference bootstrap."""
    bootstrap = "docker" if options is None else options.bootstrap
    if bootstrap not in BOOTSTRAPS:
        raise InputError(
            f"unknown Apptainer bootstrap {bootstrap!r}.",
            hint=f"Use one of: {', '.join(BOOTSTRAPS)}.",
        )
    value = None if options is None else options.source
    if value is None:
        if bootstrap not in _REF_BOOTSTRAPS:
            raise InputError(
                f"Bootstrap {bootstrap} needs the path of the base image file.",
                hint=(
                    "Pass it with --from (e.g. --bootstrap oci-archive --from base.oci.tar, written by "
                    f"`kiln export {plan.base_image} --format oci-archive -o base.oci.tar`)."
                ),
            )
        value = plan.base_image
    return _from_checked(value)


def _from_checked(value: str) -> str:
    if not value or any(c in value for c in "#\n\r") or value != value.strip():
        raise InputError(
            f"{value!r} cannot be a `From:` value of a definition file (it is empty or holds '#' or a line break).",
            hint="Give an image reference or a file path without '#'.",
        )
    return value


def _builder_image(plan: BuildPlan) -> str:
    """The toolchain's own image when extensions compile on a different base (a CUDA devel sibling)."""
    tc = plan.toolchain
    image = getattr(tc, "image", "") if tc is not None and tc.kind == "image" else ""
    return image if image and image != plan.base_image and _compiled(plan) else ""


def two_stage(plan: BuildPlan) -> bool:
    """Compile in a builder stage on the toolchain image and copy the venv into the runtime stage."""
    return bool(_builder_image(plan))


# -- checks on values that reach the definition ------------------------------------------------------


def _one_line(value: str, what: str) -> str:
    if "\n" in value or "\r" in value:
        raise SpecError(f"{what} holds a line break, which an Apptainer definition cannot carry.",
                        hint="Remove the line break from kiln.toml.")
    if "{{" in value:
        raise SpecError(f"{what} holds '{{{{', Apptainer's build-argument syntax.",
                        hint="Remove '{{' from the value in kiln.toml.")
    return value


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise SpecError(
            f"[app] env key {name!r} is not a shell variable name.",
            hint="Use letters, digits and '_' (not starting with a digit), e.g. HF_HOME.",
        )
    return name


def _q(value: str, what: str = "a value") -> str:
    """Shell-quote one word (a single line without build-argument syntax)."""
    return shlex.quote(_one_line(value, what))


def _files_path(path: str, what: str) -> str:
    """A ``%files`` operand: plain characters only (apptainer globs and splits these itself)."""
    if not _SAFE_PATH.match(path):
        raise SpecError(
            f"{what} {path!r} holds characters an Apptainer %files line cannot take "
            "(spaces, quotes, glob or shell characters).",
            hint="Rename the file or folder to letters, digits and '._-/+@'.",
        )
    return path


def _check_section_body(lines: list[str], section: str) -> list[str]:
    for line in lines:
        if line.strip().startswith("%"):
            raise SpecError(
                f"the {section} section would hold a line starting with '%', which Apptainer reads as a new section.",
                hint="Remove the leading '%' from the value in kiln.toml.",
            )
    return lines


def _section(name: str, body: list[str], args: str = "") -> list[str]:
    head = f"%{name}" + (f" {args}" if args else "")
    return [head, *[(INDENT + line) if line else "" for line in _check_section_body(body, f"%{name}")]]


# -- the pieces ----------------------------------------------------------------------------------------


def header(plan: BuildPlan, options: BaseSource | None, stage: str | None = None) -> list[str]:
    return [
        f"Bootstrap: {'docker' if options is None else options.bootstrap}",
        f"From: {from_value(plan, options)}",
        *([f"Stage: {stage}"] if stage else []),
        "",
        *rendered_by(plan),
        "# Build it in the folder that holds this file (%files paths are relative to it):",
        f"#   apptainer build --fakeroot {sif_name(plan)} {DEFFILE}",
    ]


def labels(plan: BuildPlan) -> dict[str, str]:
    """The image's labels (the same keys as the Dockerfile's LABEL lines, plus the verify paths)."""
    pairs = image_labels(plan)
    # a .sif has no ENV the NVIDIA runtime reads before start, and no other way to find its checks
    if plan.torch.cuda:
        pairs["io.torchkiln.nvidia-require-cuda"] = plan.nvidia_require_cuda or ""
    pairs["io.torchkiln.verify"] = VERIFY_SCRIPT
    if plan.prune is not None:  # %post prunes torch only: extensions build in one step with the rest of the venv
        pairs["io.torchkiln.pruned"] = "torch"
    return pairs


def section_labels(plan: BuildPlan) -> list[str]:
    body = []
    for k, v in labels(plan).items():
        if not _LABEL_KEY.match(k):  # pragma: no cover - keys are ours
            raise SpecError(f"label key {k!r} is not valid.")
        body.append(f"{k} {_one_line(v, f'label {k}')}".rstrip())
    return _section("labels", body)


def section_help(plan: BuildPlan) -> list[str]:
    t = plan.torch
    what = f"CUDA {t.cuda} build ({t.variant})" if t.cuda else "CPU-only build"
    cmd = shlex.join(plan.app.command) if plan.app.command else "python"
    nv = " --nv" if t.cuda else ""
    rows = [
        (f"apptainer run{nv} IMAGE.sif", f"runs {cmd} in {plan.app.workdir}"),
        (f"apptainer run{nv} IMAGE.sif CMD ...", "runs CMD in the current folder"),
        (f"apptainer test{nv} IMAGE.sif", f"runs torchkiln's checks ({VERIFY_SCRIPT})"),
        ("kiln verify IMAGE.sif", "the same checks, reported on the host"),
    ]
    width = max(len(a) for a, _ in rows)
    lines = [
        f"{plan.image_ref}: torch {t.version}, {what}, Python {plan.python}.",
        f"Rendered by torchkiln {__version__} from kiln.toml.",
        "",
        *(f"  {a:<{width}}  {b}" for a, b in rows),
    ]
    if t.cuda:
        lines += [
            "",
            f"GPU targets: {', '.join(f'{x.name} ({x.capability})' for x in plan.targets) or 'torch defaults'}.",
            f"Needs an NVIDIA driver >= {plan.min_driver} on the host; pass --nv to use the GPUs.",
        ]
    return _section("help", [_one_line(line, "the help text") for line in lines])


def _extension_sources(plan: BuildPlan) -> list[tuple[ExtensionPlan, str]]:
    """Extensions built from a local source tree, with where %files puts each tree."""
    return [(e, f"{KILN}/src/{i}") for i, e in enumerate(plan.extensions) if e.path]


def section_files(plan: BuildPlan, *, app: bool = True, sources: bool = True) -> list[str]:
    body = [f".kiln {KILN}"]
    for item in plan.app.copy if app else ():
        rel = _files_path(item.rstrip("/"), "[app] copy entry")
        body.append(f"{rel} {KILN}/app/{rel}")
    for e, dest in _extension_sources(plan) if sources else ():
        assert e.path is not None
        body.append(f"{_files_path(e.path.rstrip('/'), f'extension {e.name} path')} {dest}")
    return _section("files", body)


def builder_stage(plan: BuildPlan, options: BaseSource | None) -> list[list[str]]:
    """The builder stage of a two-stage definition: the whole venv, compiled on the toolchain image."""
    head = [
        f"Bootstrap: {'docker' if options is None else options.bootstrap}",
        f"From: {builder_from_value(plan, options)}",
        f"Stage: {BUILDER}",
        "",
        f"# builder: torch, packages and extensions installed into {VENV} on {_builder_image(plan)}, which has the",
        "# CUDA compiler; the final stage copies the venv and nothing else (the runtime base has no compiler)",
    ]
    post = [
        "set -eu",
        "",
        *post_os(plan),
        "",
        *post_sources(),
        "",
        *post_venv(plan),
        "",
        *post_torch(plan),
        *([""] + apptainer_steps(plan, "torch") if plan.steps_after("torch") else []),
        *([""] + post_packages(plan) if plan.pip_packages else []),
        *([""] + apptainer_steps(plan, "packages") if plan.steps_after("packages") else []),
        *([""] + proj.apptainer_post(plan) if plan.project else []),
        "",
        *post_extensions(plan, purge=False),
    ]
    return [head, section_files(plan, app=False), _section("post", post)]


def section_files_from_builder() -> list[str]:
    return _section("files", [f"{VENV} {VENV}", f"{CONSTRAINTS} {CONSTRAINTS}"], args=f"from {BUILDER}")


def environment_pairs(plan: BuildPlan) -> list[tuple[str, str]]:
    """Run-time variables (``PATH`` is handled apart: it is prepended to, not replaced).

    On a base whose torch is its own (``[torch] source = "image"``) the image's environment stays as it
    is (Apptainer keeps a docker image's ENV, NGC's ``PIP_CONSTRAINT`` among it): no venv, no constraints.
    """
    pairs = [] if plan.torch.image is not None else [
        ("VIRTUAL_ENV", VENV),
        ("PIP_CONSTRAINT", CONSTRAINTS),
        ("UV_CONSTRAINT", CONSTRAINTS),
        ("LANG", "C.UTF-8"),
        ("PYTHONUNBUFFERED", "1"),
    ]
    if plan.arch_list:
        # for extensions compiled at run time (torch.utils.cpp_extension.load, DeepSpeed's JIT ops)
        pairs.append(("TORCH_CUDA_ARCH_LIST", plan.arch_list))
    pairs += [(_env_name(k), v) for k, v in plan.app.env]
    return pairs


def section_environment(plan: BuildPlan) -> list[str]:
    body = [] if plan.torch.image is not None else [f'export PATH={shlex.quote(VENV + "/bin")}:"$PATH"']
    body += [f"export {k}={_q(v, f'the value of {k}')}" for k, v in environment_pairs(plan)]
    return _section("environment", body)


# -- %post, one function per stage ----------------------------------------------------------------------


def _comment(text: str) -> str:
    return f"# {text}"


def _compiled(plan: BuildPlan) -> tuple[ExtensionPlan, ...]:
    return tuple(e for e in plan.extensions if e.build == "source")


def _prebuilt(plan: BuildPlan) -> tuple[ExtensionPlan, ...]:
    return tuple(e for e in plan.extensions if e.build == "prebuilt")


def _builder_files(plan: BuildPlan) -> dict[str, str]:
    """``.kiln/ext/build.sh``: the builder helpers the Dockerfile's stages use (kiln_jobs, kiln_cuda_home, ...)."""
    if not _compiled(plan):
        return {}
    from torchkiln.render import extensions  # the Dockerfile's builder stages; needed only when compiling

    return extensions.context_files(plan)


def _build_tools(plan: BuildPlan) -> list[str]:
    """Compilers for the extension stage that the spec does not ask to keep (removed after it)."""
    if not _compiled(plan):
        compiled_project = plan.project is not None and plan.project.compiled and plan.torch.image is None
        return [t for t in ("build-essential",) if t not in plan.apt_packages] if compiled_project else []
    if plan.torch.image is not None:  # a development image has its compilers: none added, none purged
        return [t for t in (plan.toolchain.apt if plan.toolchain else ()) if t not in plan.apt_packages]
    tools = ["build-essential"] + (["git"] if any(e.git for e in _compiled(plan)) else [])
    return [t for t in tools if t not in plan.apt_packages]


def post_os(plan: BuildPlan, *, compilers: bool = True) -> list[str]:
    apt = list(plan.apt_packages)
    tools = _build_tools(plan) if compilers else []
    if not apt and not tools:
        return []
    pkgs = " ".join(shlex.quote(p) for p in [*apt, *tools])
    lines = [
        _comment("stage os: the spec's apt packages" + (" and compilers for the extension stage" if tools else "")),
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update",
        f"apt-get install -y --no-install-recommends {pkgs}",
    ]
    if tools:
        py = shlex.quote(plan.python_exe)
        lines += [
            _comment("extensions compile against Python's headers: the dev package when the base image lacks them"),
            f"if [ ! -f \"$({py} -c 'import sysconfig; print(sysconfig.get_path(\"include\"))')/Python.h\" ]; then",
            f"{INDENT}apt-get install -y --no-install-recommends {shlex.quote(plan.python_exe + '-dev')}",
            "fi",
        ]
    return [*lines, "rm -rf /var/lib/apt/lists/*"]


def post_sources() -> list[str]:
    return [
        _comment("package sources of this build: /kiln/sources.sh reads them from /kiln, deleted at the end"),
        f". {KILN}/sources.sh",
    ]


def post_venv(plan: BuildPlan) -> list[str]:
    install: list[str] = []
    if plan.python_install:  # a free-threaded CPython no base provides: uv's managed build, on PATH
        from torchkiln.resolve.base import PYTHON_INSTALL_DIR

        install = [
            _comment(f"the free-threaded CPython {plan.python_install}: uv installs python-build-standalone's build"),
            "UV_PYTHON_DOWNLOADS=automatic "  # sources.sh says never (the venv must not fetch one)
            f"UV_PYTHON_INSTALL_DIR={PYTHON_INSTALL_DIR} UV_PYTHON_BIN_DIR=/usr/local/bin "
            f"{UV} python install {shlex.quote(plan.python_install)}",
            f"chmod -R a+rX {PYTHON_INSTALL_DIR}",
        ]
    return [
        *install,
        _comment(f"stage venv: {VENV} with Python {plan.python}"),
        f"{UV} venv --python {shlex.quote(plan.python_exe)} {VENV}",
    ]


def _install(args: str, plan: BuildPlan | None = None) -> str:
    """uv installing into kiln's venv, or, on a base whose torch is its own, into the image's Python."""
    if plan is not None and plan.torch.image is not None:
        exe = shlex.quote(plan.torch.image.python_exe)
        return f"{UV} pip install --python {exe} --system --break-system-packages {args}"
    return f"{UV} pip install --python {VENV}/bin/python {args}"


def _constraints(plan: BuildPlan) -> str:
    """``-c`` the constraints every install after torch honours: kiln's frozen torch set, or the image's own
    constraints file plus a pin of its torch (``requirements-torch.txt`` holds exactly ``torch==VERSION``)."""
    image = plan.torch.image
    if image is None:
        return f"-c {CONSTRAINTS}"
    own = f"-c {image.constraints} " if image.constraints else ""
    return f"{own}-c {KILN}/requirements-torch.txt"


def post_image_torch(plan: BuildPlan, *, after: bool) -> list[str]:
    """Around the installs on a base whose torch is its own: the SHA-256 of torch's files, then the check."""
    image = plan.torch.image
    if image is None or not (plan.pip_packages or plan.extensions):
        return []
    if not after:
        return [
            _comment(f"torch is the base image's own ({image.facts}): its files are recorded and checked after the"),
            _comment("installs, which are constrained to it (a package that wants another torch fails)"),
            f"find {shlex.quote(image.site + '/torch')} -type f -print0 | sort -z | xargs -0 sha256sum "
            "> /tmp/kiln-torch.sha256",
        ]
    py = shlex.quote(image.python_exe)
    return [
        "sha256sum --quiet -c /tmp/kiln-torch.sha256",
        "rm /tmp/kiln-torch.sha256",
        f"{py} -c 'import torch; v = torch.__version__; assert v == \"{plan.torch.version}\", "
        "\"torch was replaced: \" + v'",
    ]


def post_torch(plan: BuildPlan) -> list[str]:
    return [
        _comment("stage torch: torch and its companions only, then frozen into the constraints file that"),
        _comment("pins them for every later install (nothing after this can replace torch)"),
        _install(f"{proj.torch_require_hashes(plan).lstrip()} -r {KILN}/requirements-torch.txt".lstrip()),
        drop_torch_tests(plan),
        *(c.replace("/kiln/prune", f"{KILN}/prune") for c in prune_files(plan, torch_folder(plan))),
        "mkdir -p /etc/pip",
        f"{UV} pip freeze --python {VENV}/bin/python > {CONSTRAINTS}",
    ]


def post_packages(plan: BuildPlan) -> list[str]:
    if not plan.pip_packages:
        return []
    what = "the image's constraints and its torch" if plan.torch.image is not None else "the torch set above"
    return [
        _comment(f"stage packages: the spec's pip packages, constrained to {what}"),
        _install(f"{_constraints(plan)} -r {KILN}/requirements.txt", plan),
    ]


def _toolchain(plan: BuildPlan) -> list[str]:
    """A CUDA compiler of torch's own CUDA version, exported as CUDA_HOME (and nvcc checked against torch)."""
    if not plan.torch.cuda:
        return []
    tc = plan.toolchain
    if tc is not None and tc.kind == "wheels":
        reqs = " ".join(shlex.quote(r) for r in tc.compiler)
        return [
            _comment(f"CUDA {tc.cuda} compiler from NVIDIA's wheels, in a venv of its own under /kiln (deleted at"),
            _comment("the end), merged into one CUDA_HOME by kiln_cuda_home; the runtime keeps only torch's libraries"),
            f"{UV} venv --python {shlex.quote(plan.python_exe)} {TOOLCHAIN_VENV}",
            f"{UV} pip install --python {TOOLCHAIN_VENV}/bin/python {reqs}",
            f"KILN_PY={TOOLCHAIN_VENV}/bin/python kiln_cuda_home {CUDA_HOME}",
            f"export CUDA_HOME={CUDA_HOME}",
            'export PATH="$CUDA_HOME/bin:$PATH"',
            f"kiln_check_nvcc {shlex.quote(tc.cuda)}",
        ]
    cuda = tc.cuda if tc is not None else plan.torch.cuda
    return [
        _comment(f"the base image's own CUDA {cuda} toolkit"),
        'export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"',
        'export PATH="$CUDA_HOME/bin:$PATH"',
        f"kiln_check_nvcc {shlex.quote(cuda)}",
    ]


def _extension_target(e: ExtensionPlan, sources: dict[str, str]) -> str:
    if e.path:
        return sources[e.name]
    return _q(e.spec, f"extension {e.name}")


def post_extensions(plan: BuildPlan, *, purge: bool = True) -> list[str]:
    compiled, prebuilt = _compiled(plan), _prebuilt(plan)
    if not compiled and not prebuilt:
        return []
    lines = [
        _comment("stage extensions: compiled against the torch installed above, so without build isolation"),
        _comment("(their builds import torch), for the plan's GPU targets, MAX_JOBS from the memory each job needs"),
    ]
    if compiled:
        sources = {e.name: dest for e, dest in _extension_sources(plan)}
        requires = sorted({r for e in compiled for r in e.build_requires})
        if plan.torch.image is not None:  # the image's Python: build.sh's checks run it
            lines.append(f"export KILN_PY={shlex.quote(plan.torch.image.python_exe)}")
        lines.append(f". {KILN}/ext/build.sh")
        if plan.torch.image is None:
            lines.append(f'export PATH={shlex.quote(VENV + "/bin")}:"$PATH" VIRTUAL_ENV={VENV}')
        lines += _toolchain(plan)
        if plan.arch_list:
            lines.append(f"export TORCH_CUDA_ARCH_LIST={_q(plan.arch_list)}")
        if requires:
            lines.append(_install(f"{_constraints(plan)} " + " ".join(shlex.quote(r) for r in requires), plan))
        for e in compiled:
            env = [f"export {_env_name(k)}={_q(v, f'extension {e.name} {k}')}" for k, v in e.env]
            flag = "--no-build-isolation " if e.no_build_isolation else ""
            lines += [
                _comment(e.spec if e.path is None else f"{e.name} from {e.path}"),
                "(",
                *(INDENT + x for x in env),
                f'{INDENT}export MAX_JOBS="${{MAX_JOBS:-$(kiln_jobs {e.memory_per_job_gib})}}"',
                f"{INDENT}" + _install(f"{flag}{_constraints(plan)} {_extension_target(e, sources)}", plan),
                ")",
            ]
    for e in prebuilt:
        assert e.prebuilt is not None
        lines += [
            _comment(f"{e.name}: the prebuilt wheel that matches this torch, CUDA, Python and C++ ABI exactly"),
            _install(f"{_constraints(plan)} {_q(e.prebuilt, f'extension {e.name}')}", plan),
        ]
    tools = _build_tools(plan) if purge else []
    if tools:
        lines += [
            _comment("the compilers are not part of the runtime image"),
            "apt-get purge -y --auto-remove " + " ".join(tools),
            "rm -rf /var/lib/apt/lists/*",
        ]
    return lines


def post_app(plan: BuildPlan) -> list[str]:
    wd = _q(plan.app.workdir, "[app] workdir")
    lines = [_comment(f"stage app: the app files into {plan.app.workdir}, torchkiln's checks into {VERIFY_DIR}")]
    lines.append(f"mkdir -p {wd}")
    if plan.app.copy:
        lines.append(f"cp -R {KILN}/app/. {wd}/")
    lines += [
        f"mkdir -p {VERIFY_DIR}",
        f"cp {KILN}/verify/* {VERIFY_DIR}/",
        *apptainer_steps(plan, "app"),
        _comment("labels given at build time (kiln build) join the definition's"),
        f'if [ -f {KILN}/build.labels ] && [ -n "${{APPTAINER_LABELS:-}}" ]; then',
        f'{INDENT}cat {KILN}/build.labels >> "$APPTAINER_LABELS"',
        "fi",
        _comment("nothing of the build's staging folder, caches or package sources stays in the image"),
        f"rm -rf {KILN} /root/.cache/uv /tmp/kiln-uv-cache",
    ]
    return lines


def section_post(plan: BuildPlan) -> list[str]:
    steps = functools.partial(apptainer_steps, plan)
    if two_stage(plan):  # the venv comes from the builder stage: OS packages and the app only
        stages = [post_os(plan, compilers=False), steps("system"), post_app(plan)]
    elif plan.torch.image is not None:  # the base image's own torch: no venv, no torch stage
        stages = [
            post_os(plan),
            steps("system"),
            steps("torch"),
            post_sources(),
            post_image_torch(plan, after=False),
            post_packages(plan),
            post_extensions(plan),
            post_image_torch(plan, after=True),
            steps("packages"),
            post_app(plan),
        ]
    else:
        stages = [
            post_os(plan),
            steps("system"),
            post_sources(),
            post_venv(plan),
            post_torch(plan),
            steps("torch"),
            post_packages(plan),
            steps("packages"),
            proj.apptainer_post(plan),
            post_extensions(plan),
            post_app(plan),
        ]
    body = ["set -eu"]
    for stage in stages:
        if stage:
            body += ["", *stage]
    return _section("post", body)


def section_runscript(plan: BuildPlan) -> list[str]:
    for word in (*plan.app.command, *plan.app.entrypoint):
        _one_line(word, "[app] command")
    if plan.app.entrypoint:  # as docker runs it: arguments replace the command, never the entrypoint
        entry = shlex.join(plan.app.entrypoint)
        cmd = f"{entry} {shlex.join(plan.app.command)}".rstrip()
        return _section("runscript", [
            _comment(f"the spec's entrypoint in {plan.app.workdir}, with its command or the arguments given"),
            f"cd {_q(plan.app.workdir, '[app] workdir')}",
            'if [ "$#" -eq 0 ]; then',
            f"{INDENT}exec {cmd}",
            "fi",
            f'exec {entry} "$@"',
        ])
    cmd = shlex.join(plan.app.command) if plan.app.command else "python"
    return _section("runscript", [
        _comment(f"no arguments: the spec's command in {plan.app.workdir}; arguments: run them in the current folder"),
        'if [ "$#" -eq 0 ]; then',
        f"{INDENT}cd {_q(plan.app.workdir, '[app] workdir')}",
        f"{INDENT}exec {cmd}",
        "fi",
        'exec "$@"',
    ])


def section_test(plan: BuildPlan) -> list[str]:
    gpu = "GPU node" if plan.torch.cuda else "machine"
    no_gpu = f"kiln: no CUDA device visible, so only the import checks ran; run apptainer test --nv IMAGE on a {gpu}"
    return _section("test", [
        _comment("torchkiln's checks; without a visible GPU (a build host) only the import checks can run"),
        f"python {VERIFY_SCRIPT} --spec-json {VERIFY_SPEC}",
        "rc=$?",
        f'if [ "$rc" -eq {NO_GPU_EXIT} ]; then',
        f"{INDENT}echo {_q(no_gpu)} >&2",
        f"{INDENT}exit 0",
        "fi",
        'exit "$rc"',
    ])


def render_apptainer(plan: BuildPlan, options: BaseSource | None = None) -> str:
    """The whole definition file for a plan."""
    staged = two_stage(plan)
    blocks = [
        *(builder_stage(plan, options) if staged else []),
        header(plan, options, "final" if staged else None),
        section_labels(plan),
        section_help(plan),
        *([section_files_from_builder()] if staged else []),
        section_files(plan, sources=not staged),
        section_environment(plan),
        section_post(plan),
        section_runscript(plan),
        section_test(plan),
    ]
    return "\n\n".join("\n".join(b) for b in blocks) + "\n"


# -- the other files the definition needs --------------------------------------------------------------

SOURCES_SH = """\
# Sourced by %post (rendered by torchkiln). The package sources of a build sit in /kiln only while
# %post runs (kiln build puts them there; /kiln is deleted at its end, so they never reach the image):
#   /kiln/secrets/kiln-uv   a uv.toml naming the index URLs and wheel folders of this build
#   /kiln/secrets/kiln-ca   a CA bundle (PEM) for TLS-intercepting proxies or private indexes
#   /kiln/wheels/           local wheels (named as a find-links folder in the uv.toml)
export UV_CACHE_DIR=/tmp/kiln-uv-cache UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1 \\
    UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
if [ -f /kiln/secrets/kiln-uv ]; then export UV_CONFIG_FILE=/kiln/secrets/kiln-uv; fi
if [ -f /kiln/secrets/kiln-ca ]; then export SSL_CERT_FILE=/kiln/secrets/kiln-ca; fi
"""


def scriptlets(text: str) -> dict[str, str]:
    """The body of every section of a rendered definition (for ``bash -n`` and tests).

    Keys are the section line without ``%`` (``post``, ``files from builder``); sections of a stage
    other than the last are prefixed with its name (``builder/post``).
    """
    out: dict[str, str] = {}
    stages = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.lower().startswith("stage:")]
    stage = ""
    name: str | None = None
    for line in text.splitlines():
        if line.lower().startswith("bootstrap:"):
            name = None  # a new stage's header
        elif line.lower().startswith("stage:"):
            stage = line.split(":", 1)[1].strip()
        elif line.startswith("%"):
            name = line[1:].strip()
            if stage and stages and stage != stages[-1]:
                name = f"{stage}/{name}"
            out[name] = ""
        elif name is not None:
            out[name] += (line[len(INDENT):] if line.startswith(INDENT) else line) + "\n"
    return out


def apptainer_files(plan: BuildPlan, options: BaseSource | None = None) -> dict[str, str]:
    """Every generated text file of the Apptainer build folder, by relative path (sorted)."""
    torch_reqs = proj.torch_requirements(plan) or [plan.torch.requirement, *plan.torch.companions]
    files = {
        DEFFILE: render_apptainer(plan, options),
        ".kiln/requirements-torch.txt": "\n".join(torch_reqs) + "\n",
        ".kiln/requirements.txt": "".join(f"{p}\n" for p in plan.pip_packages),
        ".kiln/sources.sh": SOURCES_SH,
        ".kiln/verify/spec.json": json.dumps(verify_spec(plan), indent=2, sort_keys=True) + "\n",
        ".kiln/wheels/.keep": "",
        ".kiln/secrets/.keep": "",
        **_builder_files(plan),
        **proj.context_files(plan),
    }
    return dict(sorted(files.items()))
