"""Render a BuildPlan into a multi-stage Dockerfile. Pure and deterministic: same plan, same bytes.

Stages (runtime last, so a plain ``docker build`` gives the slim image):

* ``base``     the OS every stage shares, plus the spec's apt packages (apt caches are cache mounts);
* ``torch``    a venv holding torch and its dependencies only, in one layer of its own, and the
               constraints file that pins them (so app edits and new packages never rebuild it);
* ``packages`` the spec's pip packages installed against those constraints, one step (one layer) per
               package in the spec's order, then all at once (``stage_packages``);
* ``packages-layer`` only the files the packages added, collected into ``/opt/kiln-layer`` for dev;
* ``dev``      the torch venv and packages plus compilers (torch's own nvcc for CUDA plans: ``FROM
               toolchain``), tools and sudo, for building extensions and interactive work;
* ``runtime``  ``FROM packages`` (or torch) + app, non-root, no compilers, no caches.

The package sources (index URLs, wheel folders, a CA bundle) are not in this text: install steps
mount them as BuildKit secrets and a wheel folder from the build context, so the Dockerfile is the
same wherever it is built and nothing about the sources reaches a layer.
"""

from __future__ import annotations

import json
import shlex

from torchkiln.contract import CONSTRAINTS, UV, VENV, image_labels
from torchkiln.plan import BuildPlan
from torchkiln.render import extensions as ext
from torchkiln.render import instructions as ins
from torchkiln.render import layer_plan, reproducible
from torchkiln.render import project as proj
from torchkiln.render import steps as render_steps

LAYER = "/opt/kiln-layer"
UID = 1000
DEV_TOOLS = ("build-essential", "git", "ninja-build", "ccache", "sudo")


#: the torch stage's uv cache: a folder in the stage's own file system, removed in the same step
TORCH_UV_CACHE = "/tmp/kiln-uv-torch"


def header(plan: BuildPlan) -> list[str]:
    return ins.dockerfile_header(plan)


def stage_base(plan: BuildPlan) -> list[str]:
    lines = [
        "# base: the OS layer every stage shares; apt caches live in cache mounts, never in a layer",
        f"FROM {plan.base_image} AS base",
        *reproducible.add_mount_points(),
        ins.SHELL,
        "ENV LANG=C.UTF-8 \\",
        "    PYTHONUNBUFFERED=1",
    ]
    if plan.apt_packages:
        lines += ins.apt_install(plan.apt_packages)
    if plan.python_install:  # a free-threaded CPython that no base image provides: uv's managed build
        from torchkiln.resolve.base import PYTHON_INSTALL_DIR

        lines += ["# the free-threaded CPython the plan needs (no official image has one): python-build-standalone's",
                  f"# build via uv into {PYTHON_INSTALL_DIR}, python{plan.python_install} on PATH for every stage",
                  *ins.run(ins.SOURCE_MOUNTS, [
                      ". /kiln/sources.sh",
                      "UV_PYTHON_DOWNLOADS=automatic "  # sources.sh says never (the venv must not fetch one)
                      f"UV_PYTHON_INSTALL_DIR={PYTHON_INSTALL_DIR} UV_PYTHON_BIN_DIR=/usr/local/bin "
                      f"{UV} python install {plan.python_install}",
                      f"chmod -R a+rX {PYTHON_INSTALL_DIR}",
                      f"python{plan.python_install} -c 'import sys; assert not sys._is_gil_enabled()'"])]
    return lines + render_steps.dockerfile_steps(plan, "system")


def warm_import(plan: BuildPlan) -> str:
    """One build-time import of torch, its companions and ``[python] precompile``: it writes the .pyc files
    of exactly the modules a container loads (and fails the build early when torch cannot import)."""
    return f"{VENV}/bin/python -c 'import {', '.join(plan.precompile)}'"


def require_hashes(plan: BuildPlan) -> str:
    """A locked build (``kiln build --locked``) installs only distributions with the lock's hashes."""
    return " --require-hashes" if plan.locked is not None else ""


def requirement_files(plan: BuildPlan) -> dict[str, str]:
    """The torch layer's and the packages' requirement files: the spec's, or the lock's hashed pins."""
    if plan.locked is not None:
        torch_reqs, packages = list(plan.locked.torch), list(plan.locked.packages)
    else:
        torch_reqs, packages = [plan.torch.requirement, *plan.torch.companions], list(plan.pip_packages)
        torch_reqs = proj.torch_requirements(plan) or torch_reqs  # a project's lock that pins torch: its lines
    return {
        ".kiln/requirements-torch.txt": "\n".join(torch_reqs) + "\n",
        ".kiln/requirements.txt": "".join(f"{p}\n" for p in packages),
    }


def stage_torch(plan: BuildPlan) -> list[str]:
    py = f"{VENV}/bin/python"
    built = plan.torch.build is not None  # torch compiled in the torch-build stage: install that wheel
    wheel = f" {ext.torch_wheel_requirement()}" if built else ""
    split = layer_plan.split_torch(plan)  # CUDA libraries in layers of their own below torch's
    return [
        "# torch: a venv with torch and its dependencies only, pinned in a constraints file, in a layer of its own.",
        "# Files are written once: uv unpacks the wheels into a cache in this step's own file system, hard-links",
        "# them into the venv and the cache is removed (a cache mount would mean a second copy of 1-6 GB; this",
        "# layer is rebuilt only when the base, Python or torch changes). Bytecode: unless [python] precompile",
        "# says 'all', not every file is compiled (~5,000: 15 s, 100 MB); one import at build time writes the",
        "# .pyc files of the modules it loads (torch, its companions and the modules [python] precompile lists).",
        "# torch/test (the wheel's C++ test binaries, ~86 MB, loaded by no Python code) is removed",
        *([f"# torch's fat binaries keep only the device code of {', '.join(plan.prune.targets)}"
           " (kiln prune; [gpu] prune = false keeps them whole)"] if plan.prune else []),
        "# Every file this step writes gets the time SOURCE_DATE_EPOCH (render/reproducible.py): the venv's files",
        "# and .pyc come out identical, times included, from two builds with no shared cache",
        "FROM base AS torch",
        reproducible.ARG,
        *(layer_plan.library_steps(plan) if split else []),
        *ins.run(
            [*(m for m in ins.SOURCE_MOUNTS if m != ins.UV_CACHE_MOUNT), ins.bind("requirements-torch.txt"),
             *([ext.torch_wheel_mount()] if built else []), *([ins.bind("prune")] if plan.prune else [])],
            [
                ". /kiln/sources.sh",
                f"export UV_CACHE_DIR={TORCH_UV_CACHE} UV_LINK_MODE=hardlink"
                f" UV_COMPILE_BYTECODE={1 if plan.bytecode == 'all' else 0}",
                *([] if split else [f"{UV} venv --python {plan.python_exe} {VENV}"]),
                f"{UV} pip install --python {py}{wheel}{require_hashes(plan) or proj.torch_require_hashes(plan)}"
                " -r /kiln/requirements-torch.txt",
                ins.drop_torch_tests(plan),
                *ins.prune_files(plan, ins.torch_folder(plan)),
                "mkdir -p /etc/pip",
                f"{UV} pip freeze --python {py} > {CONSTRAINTS}",
                f"rm -rf {TORCH_UV_CACHE}",
                f"mkdir -p {reproducible.MOUNT_POINTS}",
                reproducible.stamp(),  # before the import: each .pyc records the fixed source mtime
                warm_import(plan),
                # the import makes TorchInductor's per-user cache folder (/tmp/torchinductor_root): a runtime
                # cache of the build's user, with the time of the build (render/reproducible.py)
                "rm -rf /tmp/torchinductor_*",
                reproducible.stamp(),
            ],
        ),
        *render_steps.dockerfile_steps(plan, "torch"),
        *(render_steps.dockerfile_steps(plan, "packages") if render_steps.packages_point(plan) == "torch" else []),
    ]


#: at most this many spec packages get a step of their own; the rest are installed by the joint step only
PACKAGE_STEPS = 16


def stage_packages(plan: BuildPlan) -> list[str]:
    """The spec's packages: one step per package in spec order, then one joint step; the runtime is built
    ``FROM`` this stage, so each step's files are a layer of the image.

    A package appended to the spec's list reuses the steps (and the exported layers) of every package
    before it: only its own step and the joint step run again, and only its own files are exported.
    The joint step installs the whole list at once (a no-op when the steps agree; where one package's
    step changed a version another one needs, uv resolves them together again), so the venv is always
    one consistent resolution. A locked build installs the lock's hashed pins in the joint step alone.
    """
    if not plan.pip_packages:
        return []
    py = f"{VENV}/bin/python"
    install = f"{UV} pip install --python {py}{require_hashes(plan)} -c {CONSTRAINTS}"
    steps: list[str] = []
    singles = () if plan.locked is not None else plan.pip_packages[:PACKAGE_STEPS]
    for i, package in enumerate(singles):
        mark = [ins.touch_mark()] if i == 0 else []
        steps += ins.run(ins.SOURCE_MOUNTS, [". /kiln/sources.sh", *mark, f"{install} {shlex.quote(package)}",
                                             reproducible.stamp()])
    mark = [] if singles else [ins.touch_mark()]
    steps += ins.run(
        [*ins.SOURCE_MOUNTS, ins.bind("requirements.txt")],
        [". /kiln/sources.sh", *mark, f"{install} -r /kiln/requirements.txt", reproducible.stamp()],
    )
    return [
        "# packages: the spec's pip packages, constrained so they cannot replace torch: one step per package in the",
        "# spec's order, each a layer of the runtime (a package added at the end reuses the layers before it), then",
        "# all of them at once, which keeps the venv one consistent resolution",
        "FROM torch AS packages",
        ins.SHELL,
        reproducible.ARG,
        *steps,
        *render_steps.dockerfile_steps(plan, "packages"),
    ]


def stage_packages_layer(plan: BuildPlan) -> list[str]:
    """What the packages stage added to the venv, as one folder: the dev stage (built FROM torch or the
    toolchain) copies it; the runtime, built FROM packages, needs no copy."""
    if not plan.pip_packages:
        return []
    return [
        "# packages-layer: only the files the packages stage added, collected for the dev stage to copy",
        "FROM packages AS packages-layer",
        ins.SHELL,
        f"RUN mkdir -p {LAYER} \\",
        f"    && {ins.collect_added(LAYER)}",
    ]


def _env(plan: BuildPlan) -> list[str]:
    return ins.env([
        ("PATH", f"{VENV}/bin:$PATH"),
        ("VIRTUAL_ENV", VENV),
        ("PIP_CONSTRAINT", CONSTRAINTS),
        ("UV_CONSTRAINT", CONSTRAINTS),
        *ins.gpu_env(plan),
        *plan.app.env,
    ])


def _user_ref(plan: BuildPlan) -> str:
    """USER value: numeric, so that orchestrators can prove the container is not root."""
    return "root" if plan.app.user == "root" else f"{UID}:{UID}"


def _user(plan: BuildPlan) -> list[str]:
    if plan.app.user == "root":
        return []
    u = plan.app.user
    # the user's files get SOURCE_DATE_EPOCH too (render/reproducible.py); the app's folder is made here,
    # stamped, so that WORKDIR finds it and its layer is the same everywhere
    workdir = shlex.quote(plan.app.workdir)
    return reproducible.stamped_run(
        f"useradd --create-home --uid {UID} --user-group --shell /bin/bash {u} && mkdir -p {workdir}",
        ("/etc", "/home", "/var", workdir))


def _app(plan: BuildPlan) -> list[str]:
    chown = "" if plan.app.user == "root" else f"--chown={plan.app.user}:{plan.app.user} "
    lines = [f"WORKDIR {plan.app.workdir}"]
    for item in plan.app.copy:
        dest = f"{plan.app.workdir.rstrip('/')}/{item.rstrip('/')}"
        lines.append(f"COPY {chown}{item} {dest}")
    return lines


def _copy_python(plan: BuildPlan, *, packages: bool) -> list[str]:
    """What dev (``FROM torch`` or the toolchain) and runtime (``FROM packages``) add to the venv: the
    packages' files (dev only) and the extensions."""
    lines = []
    if packages and plan.pip_packages:
        lines.append(f"COPY --from=packages-layer {LAYER}/ {VENV}/")
    if packages:
        lines += proj.copy_project_layer(plan)
    lines += ext.copy_ext_layer(plan)
    return lines


def _dev_user(plan: BuildPlan) -> list[str]:
    """The dev user may install packages (apt, uv pip into the venv) through passwordless sudo."""
    if plan.app.user == "root":
        return []
    u = plan.app.user
    return [
        f"RUN useradd --create-home --uid {UID} --user-group --shell /bin/bash {u} \\",
        f"    && echo '{u} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{u} && chmod 0440 /etc/sudoers.d/{u}",
        f"ENV CCACHE_DIR={ins.quote(f'/home/{u}/.cache/ccache')}",
    ]


def stage_dev(plan: BuildPlan) -> list[str]:
    # no entrypoint in dev (a shell for interactive work): the runtime's entrypoint and command as its command
    cmd = json.dumps([*plan.app.entrypoint, *plan.app.command] or ["bash"])
    if ext.has_toolchain(plan):
        start = ["# dev: the toolchain stage (torch's own nvcc for CUDA, g++, Ninja, ccache) plus the packages, git,",
                 "# uv and sudo (the user installs apt and pip packages with it), for building and interactive work",
                 "FROM toolchain AS dev"]
    else:
        start = ["# dev: the same Python environment plus compilers, ninja, ccache, git, uv and sudo (the user",
                 "# installs apt and pip packages with it), for building and interactive work",
                 "FROM torch AS dev"]
    return [
        *start,
        *ins.apt_install(DEV_TOOLS),
        *_copy_python(plan, packages=True),
        "COPY .kiln/bin/uv /usr/local/bin/uv",
        *_dev_user(plan),
        *_env(plan),
        *ins.labels(image_labels(plan)),
        *_app(plan),
        *proj.project_files(plan),
        *render_steps.dockerfile_steps(plan, "app"),
        *ins.run_config(plan, dev=True),
        f"USER {_user_ref(plan)}",
        f"CMD {cmd}",
    ]


def stage_runtime(plan: BuildPlan) -> list[str]:
    return [
        "# runtime: the torch and packages stages' layers as they are (not a copy of the venv: that would be a",
        "# second 1-6 GB layer to write and export) + app; no compilers, no package caches, non-root by default",
        f"FROM {proj.runtime_parent(plan)} AS runtime",
        *_user(plan),
        *_copy_python(plan, packages=False),
        *proj.project_install(plan),
        *_env(plan),
        *_cuda_compat(plan),
        *ins.labels(image_labels(plan)),
        *_app(plan),
        *proj.project_files(plan),
        *render_steps.dockerfile_steps(plan, "app"),
        *ins.run_config(plan),
        f"USER {_user_ref(plan)}",
        *ins.start(plan, "python", prefix=_compat_entrypoint(plan)),
    ]


def _compat_entrypoint(plan: BuildPlan) -> tuple[str, ...]:
    """The forward-compatibility entrypoint (``_cuda_compat``) that an [app] entrypoint runs behind, or ()."""
    if not plan.cuda_compat or plan.torch.cuda is None:
        return ()
    from torchkiln.resolve.compat import ENTRYPOINT

    return (ENTRYPOINT,)


def _cuda_compat(plan: BuildPlan) -> list[str]:
    """[gpu] forward_compat: NVIDIA's cuda-compat libraries of torch's CUDA and the entrypoint that uses them only
    when the host driver is older (never over a newer driver: no ENV LD_LIBRARY_PATH, no ldconfig)."""
    if not plan.cuda_compat or plan.torch.cuda is None:
        return []
    from torchkiln.resolve.compat import COMPAT_DIR, ENTRYPOINT

    return [
        f"# CUDA forward compatibility: the cuda-compat libraries of CUDA {plan.torch.cuda} (from NVIDIA's image), put",
        "# first on the library path at start only when the host's driver is older than them (data-center GPUs)",
        f"COPY --from={plan.cuda_compat} /usr/local/cuda-{plan.torch.cuda}/compat {COMPAT_DIR}",
        f"COPY --chmod=0755 .kiln/cuda-compat.sh {ENTRYPOINT}",
        f'ENTRYPOINT ["{ENTRYPOINT}"]',
    ]


def render_dockerfile(plan: BuildPlan) -> str:
    """The whole Dockerfile text for a plan."""
    if plan.torch.image is not None:  # the base image's own torch: render/vendor.py
        from torchkiln.render.vendor import render_vendor_dockerfile

        return render_vendor_dockerfile(plan)
    blocks = [
        header(plan),
        stage_base(plan),
        ext.stage_torch_build(plan),
        stage_torch(plan),
        stage_packages(plan),
        stage_packages_layer(plan),
        proj.stage_project_deps(plan),
        *ext.builder_stages(plan),
        proj.stage_project_build(plan),
        proj.stage_project_layer(plan),
        stage_dev(plan),
        stage_runtime(plan),
    ]
    return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"


# -- the other files of the build context ------------------------------------------------------------

SOURCES_SH = ins.SOURCES_SH
DOCKERIGNORE = ins.DOCKERIGNORE


def context_files(plan: BuildPlan) -> dict[str, str]:
    """Every generated text file of the build context, by relative path (sorted, deterministic)."""
    if plan.torch.image is not None:
        from torchkiln.render.vendor import vendor_context_files

        return vendor_context_files(plan)
    files = {
        "Dockerfile": render_dockerfile(plan),
        ".dockerignore": DOCKERIGNORE,
        **requirement_files(plan),
        ".kiln/sources.sh": SOURCES_SH,
        reproducible.MOUNT_POINTS_TAR: reproducible.mount_points_tar(),
        ".kiln/wheels/.keep": "",
        **ext.context_files(plan),
        **proj.context_files(plan),
    }
    if plan.cuda_compat and plan.torch.cuda is not None:
        from torchkiln.resolve.compat import entrypoint_script

        files[".kiln/cuda-compat.sh"] = entrypoint_script(plan.torch.cuda)
    return dict(sorted(files.items()))
