"""The project as input: ``pyproject.toml``, ``uv.lock``, ``requirements*.txt`` and the project's own package.

``read_project`` reads a project's folder into ``ProjectFacts`` (frozen data) before resolving, as the
facts of a vendor base are read before resolving: the resolver (``torchkiln.resolve.project``) turns
them into the plan's ``ProjectPlan`` and checks the torch they pin against ``[gpu]``. Where the
dependencies come from, first match wins:

1. ``uv.lock`` (in the project's folder or a folder above it, up to the spec's: a uv workspace):
   exactly the lock, exported by uv itself (``uv export --frozen``), hashes kept;
2. ``requirements*.txt`` (``[project] requirements``, default ``requirements.txt`` when present):
   read as pip reads them (``torchkiln.project.requirements``), plus the pyproject's own dependencies;
3. ``pyproject.toml``'s PEP 621 ``dependencies`` (+ ``optional-dependencies`` chosen by ``extras``,
   PEP 735 ``dependency-groups`` chosen by ``groups``).

The project itself is a package (built into a wheel in the image) when it has a ``[build-system]``
table or a ``setup.py``/``setup.cfg`` (uv's rule: a pyproject without a build system is an
application, not installed); otherwise its files are copied into the app's working folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchkiln.errors import SpecError
from torchkiln.project.requirements import PYTORCH_INDEX, RequirementLine, parse_requirements, read_requirements

#: what never goes into an image from a project folder (build outputs, caches, VCS, virtual environments)
IGNORED = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", "node_modules", "build", "dist", ".kiln", ".ipynb_checkpoints", ".idea", ".vscode",
    ".eggs", ".DS_Store", "kiln.toml", "kiln.lock",
})

TORCH_FAMILY = ("torch", "torchvision", "torchaudio")

#: build requirements that compute the version from git (absent from a build context): given a version
SCM_BACKENDS = ("setuptools-scm", "hatch-vcs", "setuptools-git-versioning", "versioningit", "dunamai",
                "pdm-backend", "poetry-dynamic-versioning")


@dataclass(frozen=True)
class TorchPin:
    """torch as the project pins it: ``2.7.1+cu128`` from a lock or a requirements file."""

    version: str  # "2.7.1" (no local label)
    local: str  # "cu128", "cpu", "" (no label: the default index's build)
    index: str  # the PyTorch index the project takes it from ("" = none named)
    where: str  # "uv.lock: torch 2.7.1+cu128 from https://download.pytorch.org/whl/cu128"

    @property
    def cuda(self) -> str:
        """The [torch] cuda this pin means: "cpu", "12.8", or "auto" (no label and no index: PyPI's build)."""
        variant = self.local or _variant_of(self.index)
        if variant == "cpu":
            return "cpu"
        m = re.fullmatch(r"cu(\d+)(\d)", variant)
        return f"{m.group(1)}.{m.group(2)}" if m else "auto"


@dataclass(frozen=True)
class ProjectFacts:
    """What a project's files say, read once before resolving (see the module docstring)."""

    root: str  # the project's folder relative to the spec's folder, posix ("." = the spec's own)
    name: str  # canonical project name ("" when the folder has no pyproject [project] table)
    version: str
    source: Literal["uv.lock", "requirements", "pyproject", "script", "none"]
    files: tuple[str, ...]  # the files read, relative to the spec's folder
    #: the dependencies, as uv reads them (hashes and markers kept), torch's own closure excluded
    requirements: tuple[RequirementLine, ...]
    #: from a lock that pins torch: torch and everything it depends on (the torch layer installs exactly these)
    torch_requirements: tuple[RequirementLine, ...]
    constraints: tuple[str, ...]
    torch: TorchPin | None
    #: torch as a direct dependency without a pin ("torch>=2.3"), and where it was read
    torch_wanted: tuple[tuple[str, str], ...]
    package: bool  # the project is a package: built into a wheel, installed in a layer of its own
    compiled: bool  # its build compiles against torch (build-system requires torch, or a torch C++/CUDA setup.py)
    build_requires: tuple[str, ...]
    scm_version: bool  # its version comes from git (setuptools-scm, hatch-vcs, ...)
    #: the dependencies could not be read statically (setup.py only, dynamic dependencies): the wheel brings them
    wheel_deps: bool
    entries: tuple[str, ...]  # the project folder's top-level files and folders that go into a build context
    extras: tuple[str, ...]
    groups: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    #: a PyTorch index the project names for an unpinned torch (its variant is the project's choice)
    torch_index: str = ""
    python: str = ""  # the project's Python from .python-version ("3.12"), "" = none
    requires_python: str = ""  # [project] requires-python
    script: str = ""  # a PEP 723 script (relative to the project's folder): the default command runs it
    #: other local packages the project depends on (uv workspace members, path requirements): (folder relative
    #: to the spec's folder, its entries); each is built into a wheel beside the project's
    locals: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def hashed(self) -> bool:
        lines = (*self.requirements, *self.torch_requirements)
        return bool(lines) and all(r.hashed for r in lines)


def _variant_of(index: str) -> str:
    m = PYTORCH_INDEX.match(index) if index else None
    return m.group("variant") if m else ""


def _load_toml(path: Path, rel: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{rel}: not valid TOML: {e}.", hint="Fix the TOML syntax at the line named.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{rel} cannot be read ({e}).", hint="Check the file and its permissions.") from None


def _req(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as e:
        raise SpecError(f"{where}: {text!r} is not a valid requirement ({e}).",
                        hint="Fix the dependency (PEP 508: name, extras, version specifier, ; markers).") from None


def pyproject_dependencies(pyproject: dict[str, Any], rel: str, extras: tuple[str, ...],
                           groups: tuple[str, ...]) -> list[tuple[str, str]]:
    """PEP 621 dependencies + the chosen extras + the chosen PEP 735 groups, as (requirement, where)."""
    project = pyproject.get("project") or {}
    name = canonicalize_name(str(project.get("name", "")))
    optional = project.get("optional-dependencies") or {}
    known_extras = {canonicalize_name(k): k for k in optional}
    out: list[tuple[str, str]] = []
    done: set[str] = set()

    def add(items: Any, where: str) -> None:
        for text in items or []:
            if not isinstance(text, str):
                raise SpecError(f"{where}: {text!r} is not a requirement string.", hint="List PEP 508 strings.")
            req = _req(text, where)
            if name and canonicalize_name(req.name) == name:  # a self-reference: "proj[extra]"
                for extra in sorted(req.extras):
                    add_extra(extra, where)
                continue
            out.append((text, where))

    def add_extra(extra: str, where: str) -> None:
        key = canonicalize_name(extra)
        if key not in known_extras:
            raise SpecError(
                f"{where}: the extra {extra!r} is not in {rel} [project.optional-dependencies] "
                f"(it has: {', '.join(sorted(known_extras)) or 'none'}).",
                hint="Fix [project] extras in the spec, or add the extra to the project.")
        if f"extra:{key}" in done:
            return
        done.add(f"extra:{key}")
        add(optional[known_extras[key]], f"{rel} [project.optional-dependencies] {known_extras[key]}")

    add(project.get("dependencies"), f"{rel} [project] dependencies")
    for extra in extras:
        add_extra(extra, "[project] extras")
    all_groups = pyproject.get("dependency-groups") or {}
    known_groups = {canonicalize_name(k): k for k in all_groups}

    def add_group(group: str, where: str, stack: tuple[str, ...] = ()) -> None:
        key = canonicalize_name(group)
        if key not in known_groups:
            raise SpecError(
                f"{where}: the dependency group {group!r} is not in {rel} [dependency-groups] "
                f"(it has: {', '.join(sorted(known_groups)) or 'none'}).",
                hint="Fix [project] groups in the spec, or add the group to the project (PEP 735).")
        if key in stack:
            raise SpecError(f"{rel} [dependency-groups] {group} includes itself.", hint="Remove the cycle.")
        if f"group:{key}" in done:
            return
        done.add(f"group:{key}")
        here = f"{rel} [dependency-groups] {known_groups[key]}"
        for item in all_groups[known_groups[key]] or []:
            if isinstance(item, dict) and "include-group" in item:
                add_group(str(item["include-group"]), here, (*stack, key))
            else:
                add([item], here)

    for group in groups:
        add_group(group, "[project] groups")
    return out


def _dynamic_dependency_files(pyproject: dict[str, Any]) -> list[str]:
    """``[tool.setuptools.dynamic] dependencies = {file = [...]}``: the requirement files that are the deps."""
    dyn = ((pyproject.get("tool") or {}).get("setuptools") or {}).get("dynamic") or {}
    spec = dyn.get("dependencies")
    if isinstance(spec, dict):
        files = spec.get("file", [])
        return [files] if isinstance(files, str) else [str(f) for f in files]
    return []


def find_lock(root: Path, bound: Path) -> Path | None:
    """``uv.lock`` in the project's folder or, for a uv workspace member, a folder above it (up to ``bound``)."""
    here = root.resolve()
    top = bound.resolve()
    while True:
        if (here / "uv.lock").is_file():
            return here / "uv.lock"
        if here == top or top not in here.parents:
            return None
        here = here.parent


def uv_export(root: Path, lock: Path, extras: tuple[str, ...], groups: tuple[str, ...], uv: str) -> str:
    """The lock, exactly, as a hashed requirements file, by uv itself (``uv export --frozen``)."""
    argv = [uv, "export", "--frozen", "--format", "requirements-txt", "--no-emit-project", "--no-header",
            "--no-annotate", "--no-default-groups", "--offline", "--quiet",
            *(a for e in extras for a in ("--extra", e)), *(a for g in groups for a in ("--group", g))]
    env = {**os.environ, "UV_NO_PROGRESS": "1", "NO_COLOR": "1"}
    try:
        r = subprocess.run(argv, cwd=root, capture_output=True, text=True, env=env, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SpecError(f"uv could not export {lock} ({e}).", hint="Check that uv runs (`uv --version`).") from None
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-6:])
        raise SpecError(
            f"uv could not export {lock} for the extras {list(extras)} and groups {list(groups)}: {tail}",
            hint="Run `uv lock` in the project to bring uv.lock up to date with pyproject.toml, and check that the "
            "[project] extras and groups exist.",
        )
    return r.stdout


def _lock_graph(lock: dict[str, Any]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for pkg in lock.get("package", []):
        name = canonicalize_name(str(pkg.get("name", "")))
        deps = graph.setdefault(name, set())
        for d in pkg.get("dependencies", []):
            deps.add(canonicalize_name(str(d.get("name", ""))))
    return graph


def torch_closure(lock: dict[str, Any]) -> set[str]:
    """torch and every package it needs, by name, from a uv.lock's dependency graph."""
    graph = _lock_graph(lock)
    seen: set[str] = set()
    todo = ["torch"] if "torch" in graph else []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(graph.get(n, ()))
    return seen


def marker_environment(python: str, platform: str) -> dict[str, str]:
    """The PEP 508 environment of the image: Linux, its CPU, its Python (for the lock's markers)."""
    machine = "aarch64" if platform.endswith("arm64") else "x86_64"
    python = python.rstrip("t")  # a free-threaded "3.13t" is Python 3.13 to markers
    return {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix", "platform_machine": machine,
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "python_version": python, "python_full_version": f"{python}.0"}


def for_image(lines: list[RequirementLine], env: dict[str, str]) -> list[RequirementLine]:
    """The lines whose markers hold in the image (a lock forked by platform lists each fork's pins)."""
    from packaging.markers import UndefinedEnvironmentName

    out = []
    for r in lines:
        marker = r.requirement.marker
        try:
            if marker is None or marker.evaluate({**env, "extra": ""}):
                out.append(r)
        except UndefinedEnvironmentName:
            out.append(r)
    return out


def _lock_torch(lock: dict[str, Any], rel: str, lines: list[RequirementLine]) -> TorchPin | None:
    """torch as the lock pins it for the image: the export's torch line that holds there (a lock forked by
    platform, as uv's PyTorch guide writes for macOS and Linux, has one per fork)."""
    torch_lines = [r for r in lines if r.name == "torch"]
    if not torch_lines:
        return None
    if len(torch_lines) > 1:
        versions = ", ".join(r.line.split(" ;")[0].split(" --hash")[0] for r in torch_lines)
        raise SpecError(
            f"{rel} pins more than one torch for the image's platform and Python ({versions}); an image holds one.",
            hint="Lock one torch for Linux (uv's [tool.uv] environments, or markers on [tool.uv.sources] torch), "
            "or take torch from torchkiln ([torch] in the spec) and drop it from the project.")
    pinned = [s for s in torch_lines[0].requirement.specifier if s.operator in ("==", "===")]
    version = pinned[0].version if pinned else ""
    base, _, local = version.partition("+")
    index = ""
    for pkg in lock.get("package", []):
        if canonicalize_name(str(pkg.get("name", ""))) == "torch" and str(pkg.get("version")) == version:
            source = pkg.get("source") or {}
            index = str(source.get("registry") or source.get("url") or "")
    where = f"{rel}: torch {version}" + (f" from {index}" if index else "")
    return TorchPin(base, local, index if PYTORCH_INDEX.match(index or "") else "", where)


def _requirement_torch(lines: list[RequirementLine], indexes: list[tuple[str, str]]) -> TorchPin | None:
    for r in lines:
        if r.name != "torch":
            continue
        req = r.requirement
        pinned = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(pinned) != 1:
            return None
        base, _, local = pinned[0].version.partition("+")
        index = indexes[0][0] if indexes else ""
        return TorchPin(base, local, index, f"{r.where}: {r.line.split(' --hash', 1)[0]}"
                        + (f" (with {index}, {indexes[0][1]})" if index else ""))
    return None


def _uv_source_index(pyproject: dict[str, Any]) -> str:
    """The URL of the index ``[tool.uv.sources] torch`` maps torch to (via ``[[tool.uv.index]]``), or ""."""
    uv = (pyproject.get("tool") or {}).get("uv") or {}
    source = (uv.get("sources") or {}).get("torch")
    names = [s.get("index") for s in (source if isinstance(source, list) else [source]) if isinstance(s, dict)]
    for index in uv.get("index") or []:
        if isinstance(index, dict) and index.get("name") in names:
            return str(index.get("url", "")).rstrip("/")
    return ""


def _compiled(root: Path, requires: list[str]) -> bool:
    if any(canonicalize_name(_req(r, "[build-system] requires").name) == "torch" for r in requires):
        return True
    setup = root / "setup.py"
    if setup.is_file():
        text = setup.read_text(encoding="utf-8", errors="replace")
        return bool(re.search(r"\b(CppExtension|CUDAExtension|BuildExtension|torch\.utils\.cpp_extension)\b", text))
    return False


def _ignore_patterns(root: Path) -> list[str]:
    """The top-level patterns of the project's ``.dockerignore`` and ``.gitignore`` (negations aside)."""
    out: list[str] = []
    for name in (".dockerignore", ".gitignore"):
        f = root / name
        if not f.is_file():
            continue
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            line = line.removeprefix("**/").removeprefix("/").rstrip("/")
            if line and "/" not in line:
                out.append(line)
    return out


def project_entries(root: Path) -> tuple[str, ...]:
    """The top-level files and folders of a project that a build context carries (sorted): not build outputs,
    caches, virtual environments, nor what its ``.dockerignore`` or ``.gitignore`` leaves out."""
    import fnmatch

    patterns = _ignore_patterns(root)
    out = []
    for p in sorted(root.iterdir(), key=lambda p: p.name):
        if p.name in IGNORED or p.name.endswith(".egg-info") or p.is_symlink() and not p.exists():
            continue
        if p.is_symlink() and not p.resolve().is_relative_to(root.resolve()):
            continue  # a link out of the project (a data mount): its target is not the project's
        if p.name in (".dockerignore", ".gitignore", ".python-version"):
            out.append(p.name)
            continue
        if any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns):
            continue
        out.append(p.name)
    return tuple(out)


_SCRIPT_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def script_metadata(path: Path, rel: str) -> dict[str, Any]:
    """The ``# /// script`` block of a single-file script (PEP 723), parsed; {} when it has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"[project] script {rel!r}: no such file.", hint="Name a .py file of the project.") from None
    blocks = [m for m in _SCRIPT_BLOCK.finditer(text) if m.group("type") == "script"]
    if len(blocks) > 1:
        raise SpecError(f"{rel} has more than one '# /// script' block.", hint="PEP 723 allows one: merge them.")
    if not blocks:
        return {}
    content = "".join(line[2:] if line.startswith("# ") else line[1:]
                      for line in blocks[0].group("content").splitlines(keepends=True))
    try:
        return tomllib.loads(content)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{rel}: its '# /// script' block is not valid TOML: {e}.",
                        hint="Fix the inline metadata (PEP 723).") from None


def read_project(spec_dir: Path, path: str = ".", *, extras: tuple[str, ...] = (), groups: tuple[str, ...] = (),
                 requirements: tuple[str, ...] = (), uv: str | None = None, script: str | None = None,
                 python: str = "", platform: str = "linux/amd64") -> ProjectFacts:
    """Read the project at ``spec_dir / path`` (see the module docstring). Raises ``SpecError`` on bad input.

    ``python`` and ``platform`` are the image's (the spec's, else the project's .python-version): a lock's
    lines are kept where their markers hold there.
    """
    root = (spec_dir / path).resolve()
    rel_root = Path(os.path.relpath(root, spec_dir.resolve())).as_posix()
    python = python or (_python_version(root, spec_dir) if root.is_dir() else "") or "3.11"
    if not root.is_dir():
        raise SpecError(f"[project] path {path!r} is not a folder next to the spec ({spec_dir}).",
                        hint="[project] path names the project's folder, relative to the folder that holds the spec.")

    def rel(p: Path) -> str:
        return Path(os.path.relpath(p, spec_dir.resolve())).as_posix()

    files: list[str] = []
    notes: list[str] = []
    pyproject: dict[str, Any] = {}
    pp = root / "pyproject.toml"
    if script is not None:  # PEP 723: the script's block is the project's metadata (and it is no package)
        meta = script_metadata(root / script, rel(root / script))
        files.append(rel(root / script))
        s_indexes: list[tuple[str, str]] = []
        uv_index = _uv_source_index(meta)
        if uv_index:
            s_indexes.append((uv_index, f"{rel(root / script)} [tool.uv.sources] torch"))
        s_reqs: list[RequirementLine] = []
        for text in meta.get("dependencies", []) or []:
            req = _req(str(text), f"{rel(root / script)} dependencies")
            s_reqs.append(RequirementLine(canonicalize_name(req.name), str(text), f"{rel(root / script)} dependencies",
                                        False))
        s_torch = _requirement_torch(s_reqs, s_indexes)
        wanted = tuple((r.line, r.where) for r in s_reqs if r.name == "torch") if s_torch is None else ()
        return ProjectFacts(
            root=rel_root, name="", version="", source="script", files=tuple(files),
            requirements=tuple(r for r in s_reqs if r.name != "torch"), torch_requirements=(), constraints=(),
            torch=s_torch, torch_wanted=wanted, package=False, compiled=False, build_requires=(), scm_version=False,
            wheel_deps=False, entries=project_entries(root), extras=(), groups=(),
            torch_index=s_indexes[0][0] if s_indexes and s_torch is None else "",
            python=_python_version(root, spec_dir),
            requires_python=str(meta.get("requires-python", "")), script=script,
        )
    if pp.is_file():
        pyproject = _load_toml(pp, rel(pp))
        files.append(rel(pp))
    project = pyproject.get("project") or {}
    name = canonicalize_name(str(project.get("name", ""))) if project.get("name") else ""
    version = str(project.get("version", "")) if "version" not in (project.get("dynamic") or []) else ""
    build_system = pyproject.get("build-system")
    uv_tool = (pyproject.get("tool") or {}).get("uv") or {}
    has_setup = (root / "setup.py").is_file() or (root / "setup.cfg").is_file()
    package = bool(build_system) or has_setup
    if uv_tool.get("package") is not None:
        package = bool(uv_tool["package"])
    if package and pyproject and not build_system:
        build_requires = ["setuptools>=61", "wheel"]
    else:
        build_requires = [str(r) for r in (build_system or {}).get("requires", [])] if build_system else (
            ["setuptools>=61", "wheel"] if has_setup else [])
    compiled = package and _compiled(root, build_requires)
    scm = any(canonicalize_name(_req(r, "[build-system] requires").name) in SCM_BACKENDS for r in build_requires)

    reqs: list[RequirementLine] = []
    torch_reqs: list[RequirementLine] = []
    constraints: list[str] = []
    torch: TorchPin | None = None
    wheel_deps = False
    torch_index = ""
    local_dirs: list[tuple[Path, str]] = []
    source: Literal["uv.lock", "requirements", "pyproject", "none"] = "none"
    lock_path = find_lock(root, spec_dir)
    req_files = [root / r for r in requirements] or ([root / "requirements.txt"]
                                                      if (root / "requirements.txt").is_file() else [])
    if lock_path is not None:
        if requirements:
            notes.append(f"{rel(lock_path)} is installed; [project] requirements ({', '.join(requirements)}) "
                         "are not read while the project has a uv.lock")
        source = "uv.lock"
        files.append(rel(lock_path))
        lock = _load_toml(lock_path, rel(lock_path))
        text = uv_export(root, lock_path, extras, groups, uv or _find_uv())
        read = parse_requirements(text, rel(lock_path), lock_path.parent, root, bound=spec_dir)
        local_dirs += read.locals
        read.requirements = for_image(read.requirements, marker_environment(python, platform))
        torch = _lock_torch(lock, rel(lock_path), read.requirements)
        closure = torch_closure(lock) if torch is not None else set()
        for r in read.requirements:
            r = RequirementLine(r.name, r.line, f"{rel(lock_path)}: {r.name}", r.hashed)
            (torch_reqs if r.name in closure else reqs).append(r)
    else:
        deps: list[tuple[str, str]] = []
        indexes: list[tuple[str, str]] = []
        if req_files:
            source = "requirements"
            for f in req_files:
                read = read_requirements(f, root, bound=spec_dir)
                files.append(rel(f))
                reqs += read.requirements
                constraints += read.constraints
                indexes += read.indexes
                notes += read.notes
                local_dirs += read.locals
        if project:
            dynamic = project.get("dynamic") or []
            if "dependencies" in dynamic:
                dep_files = _dynamic_dependency_files(pyproject)
                for dep_file in dep_files:
                    read = read_requirements(root / dep_file, root, bound=spec_dir)
                    files.append(rel(root / dep_file))
                    reqs += [r for r in read.requirements if r.line not in {x.line for x in reqs}]
                if not dep_files:
                    wheel_deps = True
            deps = pyproject_dependencies(pyproject, rel(pp), extras, groups)
            if source == "none":
                source = "pyproject"
        elif package:
            wheel_deps = True  # setup.py only: its dependencies are known once it is built
            if source == "none":
                source = "pyproject"
        if (extras or groups) and not project:
            raise SpecError(f"[project] extras/groups are set, but {rel(root)} has no pyproject.toml [project] table.",
                            hint="Remove extras and groups from [project], or give the project a pyproject.toml.")
        sourced = _uv_local_sources(pyproject, root, spec_dir, rel(pp)) if project else {}
        local_dirs += sourced.values()
        for local, _where in list(local_dirs):  # without a lock, a local package's own dependencies are read too
            sub = local / "pyproject.toml"
            if sub.is_file():
                sub_data = _load_toml(sub, rel(sub))
                deps += [d for d in pyproject_dependencies(sub_data, rel(sub), (), ())]
        local_names = set(sourced) | {_local_name(f) for f, _ in local_dirs}
        direct = _uv_direct_sources(pyproject) if project else {}
        have = {r.name for r in reqs}
        for text, where in deps:
            req = _req(text, where)
            dep = canonicalize_name(req.name)
            if dep in have or dep in local_names:
                continue
            have.add(dep)
            if dep in direct and not req.url:  # [tool.uv.sources] foo = { git = ... } / { url = ... }
                marker = f" ; {req.marker}" if req.marker else ""
                extra = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                text = f"{req.name}{extra} @ {direct[dep]}{marker}"
            reqs.append(RequirementLine(dep, text, where, False))
        uv_index = _uv_source_index(pyproject)
        if uv_index:
            indexes.insert(0, (uv_index, f"{rel(pp)} [tool.uv.sources] torch"))
        torch = _requirement_torch(for_image(reqs, marker_environment(python, platform)), indexes)
        torch_index = indexes[0][0] if indexes and torch is None else ""
    wanted = tuple((r.line.split(" --hash", 1)[0], r.where) for r in reqs if r.name == "torch") if torch is None \
        else ()
    # torch itself (and, from a lock, its closure) is installed by the torch layer: never by the project's steps
    reqs = [r for r in reqs if r.name != "torch"]
    return ProjectFacts(
        root=rel_root, name=name, version=version, source=source, files=tuple(files),
        requirements=tuple(reqs), torch_requirements=tuple(torch_reqs), constraints=tuple(constraints),
        torch=torch, torch_wanted=wanted, package=package, compiled=compiled,
        build_requires=tuple(build_requires), scm_version=scm, wheel_deps=wheel_deps,
        entries=project_entries(root), extras=tuple(extras), groups=tuple(groups), notes=tuple(notes),
        torch_index=torch_index, python=_python_version(root, spec_dir),
        requires_python=str(project.get("requires-python", "")),
        locals=tuple((rel(f), project_entries(f)) for f, _ in dict(local_dirs).items()),
    )


def _local_name(folder: Path) -> str:
    pp = folder / "pyproject.toml"
    try:
        return canonicalize_name(str((tomllib.loads(pp.read_text(encoding="utf-8")).get("project") or {})
                                     .get("name", "")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ""


def _uv_local_sources(pyproject: dict[str, Any], root: Path, bound: Path, rel_pp: str) -> dict[str, tuple[Path, str]]:
    """``[tool.uv.sources]`` entries that are local packages: ``{path = "../libs/x"}`` or ``{workspace = true}``."""
    sources = (((pyproject.get("tool") or {}).get("uv") or {}).get("sources") or {})
    out: dict[str, tuple[Path, str]] = {}
    members: dict[str, Path] | None = None
    for name, src in sources.items():
        where = f"{rel_pp} [tool.uv.sources] {name}"
        entries = src if isinstance(src, list) else [src]
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            folder: Path | None = None
            if "path" in entry:
                folder = (root / str(entry["path"])).resolve()
            elif entry.get("workspace"):
                if members is None:
                    members = _workspace_members(root, bound)
                folder = members.get(canonicalize_name(name))
                if folder is None:
                    raise SpecError(f"{where}: no member of the uv workspace above {root} is named {name!r}.",
                                    hint="Check [tool.uv.workspace] members, or put the spec at the workspace's top.")
            if folder is None:
                continue
            top = bound.resolve()
            if not (folder == top or top in folder.parents) or not folder.is_dir():
                raise SpecError(f"{where}: {folder} is not a folder inside {top}, which the build context carries.",
                                hint="Put the spec at the top of the repository and point [project] path at the "
                                     "project.")
            out[canonicalize_name(name)] = (folder, where)
    return out


def _uv_direct_sources(pyproject: dict[str, Any]) -> dict[str, str]:
    """``[tool.uv.sources]`` entries that name a git repository or a URL: the direct reference uv would use."""
    sources = (((pyproject.get("tool") or {}).get("uv") or {}).get("sources") or {})
    out: dict[str, str] = {}
    for name, src in sources.items():
        if not isinstance(src, dict):
            continue
        if "git" in src:
            ref = src.get("rev") or src.get("tag") or src.get("branch")
            sub = f"#subdirectory={src['subdirectory']}" if src.get("subdirectory") else ""
            out[canonicalize_name(name)] = f"git+{src['git']}" + (f"@{ref}" if ref else "") + sub
        elif "url" in src:
            out[canonicalize_name(name)] = str(src["url"])
    return out


def _workspace_members(root: Path, bound: Path) -> dict[str, Path]:
    """The members of the uv workspace ``root`` belongs to, by project name."""
    here, top = root.resolve(), bound.resolve()
    while True:
        pp = here / "pyproject.toml"
        if pp.is_file():
            ws = (((_load_toml(pp, str(pp)).get("tool") or {}).get("uv") or {}).get("workspace"))
            if isinstance(ws, dict):
                out: dict[str, Path] = {}
                for pattern in ws.get("members", []) or []:
                    for folder in sorted(here.glob(str(pattern))):
                        if (folder / "pyproject.toml").is_file():
                            out[_local_name(folder)] = folder.resolve()
                return out
        if here == top or top not in here.parents:
            return {}
        here = here.parent


def _python_version(root: Path, bound: Path) -> str:
    """The Python of uv's ``.python-version`` (in the project's folder or above, up to ``bound``), as "3.12"."""
    here, top = root.resolve(), bound.resolve()
    while True:
        f = here / ".python-version"
        if f.is_file():
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
                m = re.search(r"(?:^|[^\d.])(3\.\d{1,2})(?:\.\d+)?\s*$", line.strip())
                if m and not line.lstrip().startswith("#"):
                    return m.group(1)
            return ""
        if here == top or top not in here.parents:
            return ""
        here = here.parent


def _find_uv() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except ImportError:  # pragma: no cover - uv is a dependency
        import shutil

        found = shutil.which("uv")
        if found is None:
            raise SpecError("reading uv.lock needs uv, which is not installed.", hint="pip install uv") from None
        return found
