"""``[project]`` stages: the project's dependencies, its own package's wheel, and the layer that installs it.

Pure and deterministic. Inserted by ``render/dockerfile.py`` after ``packages`` (the spec's own pip
packages) and before the builder stages:

* ``project-deps`` FROM packages (or torch): the project's dependencies, one step (one layer of the
  runtime) per package in the lock's (or file's) order, then all at once. A lock's lines are complete
  and hashed: each step installs one of them with ``--no-deps --require-hashes``, so every file is
  checked against the lock and a step never resolves; lines without a lock are installed as the
  spec's packages are (constrained by torch's pins). The joint step is a no-op when the steps agree.
* ``project-build`` FROM project-deps (or the toolchain, when the project compiles against torch):
  the project's source (``.kiln/project-src``, the context's copy of its folder) built into a wheel
  by ``uv build --no-build-isolation`` against the installed torch and dependencies; only the wheel
  leaves the stage.
* ``project-layer`` FROM project-deps: what the dependencies and the wheel add to the venv, collected
  for the dev stage (built FROM torch or the toolchain) to copy.

The runtime is built FROM project-deps and installs the wheel in one step of its own (``project_install``):
an edit to the project's code rebuilds the wheel and that one layer, nothing below it.
"""

from __future__ import annotations

import re
import shlex

from torchkiln.contract import CONSTRAINTS, UV, VENV
from torchkiln.plan import BuildPlan, ProjectPlan
from torchkiln.render import instructions as ins

#: the context's copy of the project's folder, and its requirement files (per step and joint)
SRC = ".kiln/project-src"
REQS = ".kiln/project"
WHEEL_DIR = "/opt/kiln-project"
LAYER = "/opt/kiln-project-layer"
MARK = "/tmp/kiln-project-mark"
#: at most this many project packages get a step of their own (as for [packages] pip)
STEPS = 16
#: the version a project whose version comes from git is built with (a build context has no .git)
SCM_VERSION = "0.0.0"


def project(plan: BuildPlan) -> ProjectPlan | None:
    return plan.project


def has_deps(plan: BuildPlan) -> bool:
    return plan.project is not None and bool(plan.project.requirements)


def has_package(plan: BuildPlan) -> bool:
    """Wheels are built in project-build: the project's own, and those of the local packages it depends on."""
    return plan.project is not None and (plan.project.package or bool(plan.project.locals))


def local_dir(path: str) -> str:
    """Where the build context carries a local package the project depends on."""
    return f".kiln/project-local/{_slug(path)}"


def deps_parent(plan: BuildPlan) -> str:
    """The stage the project's dependencies are installed over: the spec's packages, else torch."""
    return "packages" if plan.pip_packages else "torch"


def runtime_parent(plan: BuildPlan) -> str:
    """The stage the runtime starts FROM: the last stage of installed dependencies."""
    return "project-deps" if has_deps(plan) else deps_parent(plan)


def locked(plan: BuildPlan) -> bool:
    """The project's lines are a lock's (complete and hashed): installed one by one without resolving."""
    p = plan.project
    return p is not None and p.source == "uv.lock"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower())


def step_files(plan: BuildPlan) -> list[tuple[str, str, str]]:
    """(package name, context file, its line) of each package that has a step of its own."""
    p = plan.project
    if p is None:
        return []
    out = []
    for i, (name, line) in enumerate(list(zip(p.names, p.requirements, strict=True))[:STEPS]):
        out.append((name, f"project/{i:03d}-{_slug(name)}.txt", line))
    return out


def requirement_files(plan: BuildPlan) -> dict[str, str]:
    """The project's requirement files of the build context (``.kiln/project/...``)."""
    p = plan.project
    if p is None:
        return {}
    files = {f".kiln/{rel}": _lines(line) for _, rel, line in step_files(plan)}
    if p.requirements:
        files[f"{REQS}/requirements.txt"] = "".join(_lines(r) for r in p.requirements)
    if p.constraints:
        files[f"{REQS}/constraints.txt"] = "".join(f"{c}\n" for c in p.constraints)
    return files


def _lines(line: str) -> str:
    """A requirement line as a file holds it: each --hash on a line of its own (as uv export writes it)."""
    parts = line.split(" --hash=")
    return " \\\n    --hash=".join(parts) + "\n"


def torch_requirements(plan: BuildPlan) -> list[str] | None:
    """The torch layer's lines when the project's lock pins torch (torch and its closure, hashed), else None."""
    p = plan.project
    if p is None or not p.torch_requirements:
        return None
    return [_lines(r).rstrip("\n") for r in p.torch_requirements]


def torch_require_hashes(plan: BuildPlan) -> str:
    p = plan.project
    if p is not None and p.torch_requirements and all("--hash=" in r for r in p.torch_requirements):
        return " --require-hashes"
    return ""


def _install(plan: BuildPlan, *, one: bool) -> str:
    p = plan.project
    assert p is not None
    py = f"{VENV}/bin/python"
    flags = ""
    if locked(plan):
        flags += " --no-deps" if one else ""
        flags += " --require-hashes" if p.hashed else ""
    extra = f" -c /kiln/{REQS.removeprefix('.kiln/')}/constraints.txt" if p.constraints else ""
    return f"{UV} pip install --python {py}{flags} -c {CONSTRAINTS}{extra}"


def _constraint_mount(plan: BuildPlan) -> list[str]:
    p = plan.project
    return [ins.bind("project/constraints.txt")] if p is not None and p.constraints else []


def stage_project_deps(plan: BuildPlan) -> list[str]:
    if not has_deps(plan):
        return []
    p = plan.project
    assert p is not None
    steps: list[str] = []
    singles = step_files(plan)
    for i, (_name, rel, _line) in enumerate(singles):
        mark = [f"touch {MARK}"] if i == 0 else []
        steps += ins.run([*ins.SOURCE_MOUNTS, *_constraint_mount(plan), ins.bind(rel)],
                         [". /kiln/sources.sh", *mark, f"{_install(plan, one=True)} -r /kiln/{rel}"])
    mark = [] if singles else [f"touch {MARK}"]
    steps += ins.run(
        [*ins.SOURCE_MOUNTS, *_constraint_mount(plan), ins.bind("project/requirements.txt")],
        [". /kiln/sources.sh", *mark, f"{_install(plan, one=False)} -r /kiln/project/requirements.txt"],
    )
    git: list[str] = []
    if any(" @ git+" in r or r.startswith("git+") for r in p.requirements):
        # uv clones git dependencies with git itself (it then stays in the runtime, which is FROM this stage)
        git = ["# git dependencies: uv clones them with git", *ins.apt_install(("git", "ca-certificates"))]
    how = ("exactly the lock: one hashed package per step, without resolving" if locked(plan)
           else "constrained by torch's pins: one package per step")
    return [
        f"# project-deps: the project's dependencies from {p.source} ({how}); each step is a layer",
        "# of the runtime (a package added at the end reuses the layers before it), then all of them at once",
        f"FROM {deps_parent(plan)} AS project-deps",
        ins.SHELL,
        *git,
        *steps,
    ]


def _build_parent(plan: BuildPlan) -> str:
    from torchkiln.render import extensions as ext

    p = plan.project
    assert p is not None
    if p.compiled and ext.has_toolchain(plan):
        return "toolchain"
    return runtime_parent(plan)


def stage_project_build(plan: BuildPlan) -> list[str]:
    """The project's own package built into a wheel, against the image's torch and the installed dependencies."""
    if not has_package(plan):
        return []
    p = plan.project
    assert p is not None
    py = f"{VENV}/bin/python"
    parent = _build_parent(plan)
    local_builds: list[str] = []
    for path, _entries in p.locals:  # with build isolation: their build backends come from the package sources
        src = local_dir(path)
        local_builds += [f"# {path}: a local package the project depends on, built into a wheel beside the project's",
                         *ins.run([*ins.SOURCE_MOUNTS, f"type=bind,source={src},target=/{src.removeprefix('.')},rw"],
                                  [". /kiln/sources.sh",
                                   f"{UV} build --wheel --python {py} --out-dir {WHEEL_DIR} /{src.removeprefix('.')}"])]
    lines = [
        "# project-build: the project's own package built into a wheel (no build isolation: against the image's",
        "# torch and the installed dependencies); only the wheel leaves this stage",
        f"FROM {parent} AS project-build",
        ins.SHELL,
    ]
    lines += local_builds
    if not p.package:
        return lines
    if p.compiled and parent != "toolchain":
        from torchkiln.render import extensions as ext

        lines += ext._builder_apt(plan, plan.python_exe)  # g++, ccache and Python's headers when the base lacks them
    env = []
    if p.scm_version:
        env.append(f"export SETUPTOOLS_SCM_PRETEND_VERSION=${{SETUPTOOLS_SCM_PRETEND_VERSION:-{SCM_VERSION}}}"
                   " PDM_BUILD_SCM_VERSION=${SETUPTOOLS_SCM_PRETEND_VERSION:-" + SCM_VERSION + "}")
    if p.compiled:
        env.append('export MAX_JOBS="${MAX_JOBS:-$(nproc)}"')
    requires = " ".join(shlex.quote(r) for r in p.build_requires)
    if requires:  # a step of its own, before the source is mounted: an edit of the code does not repeat it
        lines += ins.run(list(ins.SOURCE_MOUNTS),
                         [". /kiln/sources.sh", f"{UV} pip install --python {py} -c {CONSTRAINTS} {requires}"])
    lines += [
        "ARG SETUPTOOLS_SCM_PRETEND_VERSION" if p.scm_version else "",
        "ARG MAX_JOBS" if p.compiled else "",
        *ins.run(
            [*ins.SOURCE_MOUNTS, f"type=bind,source={SRC},target=/kiln/project-src,rw"],
            [
                ". /kiln/sources.sh",
                *env,
                f"{UV} build --wheel --no-build-isolation --python {py} --out-dir {WHEEL_DIR} /kiln/project-src",
                f"ls {WHEEL_DIR}",
            ],
        ),
    ]
    return [line for line in lines if line]


def project_install(plan: BuildPlan) -> list[str]:
    """The runtime's (and project-layer's) step that installs the project's wheel: a layer of its own."""
    if not has_package(plan):
        return []
    p = plan.project
    assert p is not None
    py = f"{VENV}/bin/python"
    deps = "" if p.wheel_deps else " --no-deps"
    return [
        f"# the project's own package ({p.name or p.root}), built in project-build: one layer, the only one an edit of",
        "# its code rebuilds",
        *ins.run([*ins.SOURCE_MOUNTS, f"type=bind,from=project-build,source={WHEEL_DIR},target=/kiln/project-wheel"],
                 [". /kiln/sources.sh", f"{UV} pip install --python {py}{deps} -c {CONSTRAINTS} "
                                        "/kiln/project-wheel/*.whl"]),
    ]


def stage_project_layer(plan: BuildPlan) -> list[str]:
    """What the project's dependencies and package add to the venv, collected for the dev stage."""
    p = plan.project
    if p is None or not (p.requirements or p.package):
        return []
    mark = [] if has_deps(plan) else [f"RUN touch {MARK}"]
    install = project_install(plan)
    return [
        "# project-layer: the files the project's dependencies and package added, collected for the dev stage",
        f"FROM {runtime_parent(plan)} AS project-layer",
        ins.SHELL,
        *mark,
        *install[2:],
        f"RUN mkdir -p {LAYER} \\",
        f"    && find {VENV} -cnewer {MARK} ! -type d -printf '%P\\n'"
        f" | tar -C {VENV} --no-recursion -T - -cf - | tar -C {LAYER} -xf -",
    ]


def copy_project_layer(plan: BuildPlan) -> list[str]:
    """The dev stage's copy of the project's installed files."""
    if not stage_project_layer(plan):
        return []
    return [f"COPY --from=project-layer {LAYER}/ {VENV}/"]


def project_files(plan: BuildPlan) -> list[str]:
    """A project that is not a package (a requirements.txt and a train.py): its files into the working folder,
    unless ``[app] copy`` chooses what to copy."""
    p = plan.project
    if p is None or p.package or plan.app.copy or not p.entries:
        return []
    chown = "" if plan.app.user == "root" else f"--chown={plan.app.user}:{plan.app.user} "
    return [f"COPY {chown}{SRC}/ {plan.app.workdir.rstrip('/')}/"]


def context_files(plan: BuildPlan) -> dict[str, str]:
    return requirement_files(plan)


def context_copies(plan: BuildPlan) -> dict[str, str]:
    """Files and folders of the project the context carries: ``.kiln/project-src/<entry>`` -> the project's path
    (relative to the spec's folder)."""
    p = plan.project
    if p is None:
        return {}
    out: dict[str, str] = {}
    if p.package or project_files(plan):
        root = "" if p.root == "." else p.root.rstrip("/") + "/"
        out.update({f"{SRC}/{e}": f"{root}{e}" for e in p.entries})
    for path, entries in p.locals:
        out.update({f"{local_dir(path)}/{e}": f"{path}/{e}" for e in entries})
    return out


# -- the Apptainer definition ------------------------------------------------------------------------


def apptainer_post(plan: BuildPlan) -> list[str]:
    """The definition's %post lines for the project: its dependencies (the lock's exactly), then its own
    package built into a wheel and installed (a .sif has no layers: one stage after the packages)."""
    from torchkiln.contract import KILN

    p = plan.project
    if p is None:
        return []
    py = f"{VENV}/bin/python"
    lines = [f"# stage project: the dependencies from {p.source}" + (", then its own package as a wheel"
                                                                    if p.package else "")]
    extra = f" -c {KILN}/project/constraints.txt" if p.constraints else ""
    if p.requirements:
        hashes = " --require-hashes" if locked(plan) and p.hashed else ""
        lines.append(f"{UV} pip install --python {py}{hashes} -c {CONSTRAINTS}{extra} "
                     f"-r {KILN}/project/requirements.txt")
    for path, _entries in p.locals:
        src = f"{KILN}/{local_dir(path).removeprefix('.kiln/')}"
        lines.append(f"{UV} build --wheel --python {py} --out-dir /tmp/kiln-project {src}")
    if p.package:
        if p.build_requires:
            lines.append(f"{UV} pip install --python {py} -c {CONSTRAINTS} "
                         + " ".join(shlex.quote(r) for r in p.build_requires))
        if p.scm_version:
            lines.append(f"export SETUPTOOLS_SCM_PRETEND_VERSION=${{SETUPTOOLS_SCM_PRETEND_VERSION:-{SCM_VERSION}}}")
        lines.append(f"{UV} build --wheel --no-build-isolation --python {py} --out-dir /tmp/kiln-project "
                     f"{KILN}/project-src")
    if has_package(plan):
        lines += [
            f"{UV} pip install --python {py}{'' if p.wheel_deps else ' --no-deps'} -c {CONSTRAINTS} "
            "/tmp/kiln-project/*.whl",
            "rm -rf /tmp/kiln-project",
        ]
    if project_files(plan):
        wd = shlex.quote(plan.app.workdir)
        lines += [f"mkdir -p {wd}", f"cp -R {KILN}/project-src/. {wd}/"]
    return lines
