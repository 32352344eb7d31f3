"""``kiln init --from PATH``: a starter spec for a repository that exists already.

What it reads, in the folder given:

* a Python project (``pyproject.toml``, ``uv.lock``, ``requirements*.txt``, or one script with PEP 723
  metadata) becomes a ``[project]`` table (docs/project.md): the project's dependencies, its torch pin
  and its own package are read from its files when the spec is loaded, so nothing of them is copied
  into ``[packages]``, ``[torch]`` or ``[[steps]]``. ``extras``, ``requirements`` (a Dockerfile's
  ``pip install -r FILE`` or ``pip install .[extra]``), ``script`` and ``path`` (a uv workspace's top:
  the one member no other member depends on) are written only where the default would differ; a
  ``[torch] version`` is never written where the project pins torch;
* a folder with a Dockerfile and none of those (or a Dockerfile ``FROM`` NGC's PyTorch image, which
  ``[project]`` does not take): requirements into ``[packages] pip`` and ``[torch]`` (a ``+cu121``
  local version or a PyTorch index URL names the CUDA variant); a local path (``./mylib``) is copied
  with the app and installed by a ``[[steps]]`` entry after it; a pyproject's dependencies the same
  way, the project itself copied and installed after the app;
* a ``Dockerfile``: its final stage's ``FROM`` (a ``python:X.Y`` image sets the Python version, NGC's
  PyTorch image becomes ``[torch] source = "image"``, any other image ``[base] image``), ``apt-get
  install`` and ``pip install`` lines, ``COPY``/``ADD`` of local files, ``WORKDIR``, ``ENV``, ``EXPOSE``,
  ``USER``, ``CMD``, ``ENTRYPOINT`` and ``HEALTHCHECK``; a ``RUN`` command that is none of these becomes a
  ``[[steps]]`` entry at the point it had, and what maps to nothing is listed.

The spec is checked before it is written: it must parse and resolve, and where the resolver offers a
fix (an older torch on a newer Python ...) the first one is applied and listed. Reading only: nothing
here writes (``cli/init.py`` writes the text, whole or not at all).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import tomli_w
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from torchkiln.errors import InputError, ResolveError, SpecError

TORCH = "torch"
COMPANIONS = ("torchvision", "torchaudio")
_CU = re.compile(r"cu(\d{2})(\d)\b")
_PY_IMAGE = re.compile(r"^(?:docker\.io/)?(?:library/)?python:(3\.\d{1,2})")
_NGC = re.compile(r"^nvcr\.io/nvidia/pytorch:")
#: never copied with "COPY . ": torchkiln makes its own build context
_NOT_APP = {"Dockerfile", ".dockerignore", ".git", "kiln.toml", "kiln.lock", ".venv", "venv", "__pycache__",
            ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "uv.lock", "node_modules"}


@dataclass
class Starter:
    """What was read (``found``), what could not be mapped (``unmapped``), changes made so that the spec
    resolves (``fixed``), and the spec itself as TOML data."""

    name: str
    found: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    python: str | None = None
    torch: dict[str, Any] = field(default_factory=dict)
    companions: list[str] = field(default_factory=list)
    pip: list[str] = field(default_factory=list)
    apt: list[str] = field(default_factory=list)
    base: dict[str, str] = field(default_factory=dict)
    app: dict[str, Any] = field(default_factory=dict)
    copy: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: the requirement files read (each once)
    read_files: set[str] = field(default_factory=set)
    #: the files the starter was read from, in order
    sources: list[str] = field(default_factory=list)
    #: the ``[project]`` table, or None where the dependencies are mapped onto [packages] (no project files)
    project: dict[str, Any] | None = None
    #: requirement files a Dockerfile installs (``pip install -r``): [project] requirements where not the default
    project_requirements: list[str] = field(default_factory=list)
    #: the project pins torch (its lock or requirements): no [torch] version/cuda may be written
    project_torch: bool = False

    def spec(self) -> dict[str, Any]:
        data: dict[str, Any] = {"image": {"name": self.name, "tag": "latest"}}
        if self.python:
            data["python"] = {"version": self.python}
        torch = dict(self.torch)
        if self.companions:
            torch["packages"] = sorted(set(self.companions))
        if torch:
            data["torch"] = torch
        packages = {k: list(dict.fromkeys(v)) for k, v in (("pip", self.pip), ("apt", self.apt)) if v}
        if packages:
            data["packages"] = packages
        if self.base:
            data["base"] = dict(self.base)
        if self.project is not None:
            data["project"] = dict(self.project)
        app = dict(self.app)
        if self.copy:
            app["copy"] = list(dict.fromkeys(self.copy))
        if app:
            data["app"] = app
        if self.steps:
            data["steps"] = self.steps
        return data


def has_tool_kiln(folder: Path) -> bool:
    """The folder's pyproject.toml holds a kiln spec already (``[tool.kiln]``, docs/project.md)."""
    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # none, or starter_from says what is wrong with it
    return "kiln" in (data.get("tool") or {})


def image_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return name or "app"


# -- requirements ------------------------------------------------------------------------------------


def add_requirement(st: Starter, line: str, where: str) -> None:
    """One requirement (a requirements.txt line or a dependency of pyproject.toml) into the starter."""
    text = line.split(" #", 1)[0].strip()
    if not text or text.startswith("#"):
        return
    if text.startswith(("-e ", "--editable ")):
        text = text.split(None, 1)[1].strip()
    if text.startswith((".", "/")) or text.startswith("file:"):
        _local_package(st, text.removeprefix("file:"), where)
        return
    if text.startswith("-"):
        opt, _, value = text.partition(" ")
        if opt in ("--extra-index-url", "--index-url", "-i", "--find-links", "-f"):
            _index(st, value.strip(), f"{where}: {text}")
        else:
            st.unmapped.append(f"{where}: {text} (an option torchkiln does not take from requirements)")
        return
    try:
        req = Requirement(text)
    except InvalidRequirement:
        st.unmapped.append(f"{where}: {text} (not a requirement torchkiln can read)")
        return
    name = req.name.lower()
    if name == TORCH:
        _torch(st, req, where)
    elif name in COMPANIONS:
        st.companions.append(name)
    else:
        st.pip.append(str(req))


def _torch(st: Starter, req: Requirement, where: str) -> None:
    spec = str(req.specifier)
    local = re.search(r"\+(cu\d{3}|cpu)\b", spec)
    if local:
        st.torch["cuda"] = "cpu" if local.group(1) == "cpu" else local.group(1)
        spec = re.sub(r"\+(cu\d{3}|cpu)\b", "", spec)
    pins = [s for s in SpecifierSet(spec) if s.operator in ("==", "===")]
    if len(pins) == 1 and "*" not in pins[0].version:
        st.torch["version"] = pins[0].version
    elif spec:
        st.torch["version"] = spec
    st.found.append(f"{where}: torch{(' ' + str(req.specifier)) if req.specifier else ''} → [torch]")


def _index(st: Starter, url: str, what: str) -> None:
    m = _CU.search(url)
    if "download.pytorch.org" in url or "/whl/" in url:
        if m:
            st.torch["cuda"] = f"{m.group(1)}.{m.group(2)}"
        elif url.rstrip("/").endswith("/cpu"):
            st.torch["cuda"] = "cpu"
        st.found.append(f"{what} → [torch] cuda (torchkiln finds PyTorch's index itself)")
        return
    st.unmapped.append(f"{what} (a package index is this machine's business: `kiln config set sources.index_url "
                       "URL`, or [sources] in the spec)")


def _local_package(st: Starter, path: str, where: str) -> None:
    own = re.fullmatch(r"\.(?:\[([A-Za-z0-9._,\s-]*)\])?/?", path.strip())
    if st.project is not None and own:  # the project itself: [project] builds and installs its wheel
        extras = [e.strip() for e in (own.group(1) or "").split(",") if e.strip()]
        if extras:
            st.project["extras"] = list(dict.fromkeys([*st.project.get("extras", []), *extras]))
        st.found.append(f"{where}: {path} → [project]{' extras ' + ', '.join(extras) if extras else ''} (the "
                        "project's own package)")
        return
    rel = path.strip().rstrip("/").removeprefix("./") or "."
    if rel in (".", "") or rel.startswith("/") or ".." in Path(rel).parts:
        st.unmapped.append(f"{where}: {path} (a local package outside a sub-folder: install it with a [[steps]] "
                           "entry)")
        return
    st.copy.append(rel)
    st.steps.append({"after": "app", "name": f"install {rel}", "run": f"uv pip install --no-deps ./{rel}"})
    st.found.append(f"{where}: {path} → [app] copy + a step that installs it")


def read_requirements(st: Starter, folder: Path, name: str) -> bool:
    """A requirements file of the folder (and the files it includes with ``-r``), each read once."""
    path = folder / name
    if not path.is_file() or ".." in Path(name).parts:
        return False
    if name in st.read_files:
        return True
    st.read_files.add(name)
    st.sources.append(name)
    if st.project is not None:  # [project] reads it (includes, constraints, hashes) when the spec is loaded
        st.project_requirements.append(name)
        st.found.append(f"{name} → [project] (installed as pip reads it)")
        return True
    count = 0
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if line.startswith(("-r ", "--requirement ")):
            read_requirements(st, folder, line.split(None, 1)[1].strip())
        elif line.startswith(("-c ", "--constraint ")):
            st.unmapped.append(f"{name}: {line} (constraints files are not read; pin in [packages] pip)")
        elif line and not line.startswith("#"):
            add_requirement(st, line, name)
            count += 1
    st.found.append(f"{name}: {count} requirements")
    return True


# -- pyproject.toml ----------------------------------------------------------------------------------


def read_pyproject(st: Starter, folder: Path) -> bool:
    path = folder / "pyproject.toml"
    if not path.is_file():
        return False
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not valid TOML ({e}).", hint="Fix pyproject.toml, or point --from elsewhere.") \
            from None
    st.sources.append("pyproject.toml")
    project = data.get("project") or {}
    if isinstance(project.get("name"), str) and not (st.project or {}).get("path"):
        st.name = image_name(project["name"])
    if st.project is not None:
        _pyproject_as_project(st, data)
        return True
    for dep in project.get("dependencies") or []:
        if isinstance(dep, str):
            add_requirement(st, dep, "pyproject.toml")
    extras = project.get("optional-dependencies") or {}
    if extras:
        st.unmapped.append(f"pyproject.toml: optional dependencies ({', '.join(sorted(extras))}) are not installed; "
                           "list the ones the image needs in [packages] pip")
    rp = project.get("requires-python")
    if isinstance(rp, str):
        st.python = _python_for(rp)
    uv_sources = ((data.get("tool") or {}).get("uv") or {}).get("index") or []
    for index in uv_sources:
        if isinstance(index, dict) and isinstance(index.get("url"), str):
            _index(st, index["url"], f"pyproject.toml [[tool.uv.index]] {index['url']}")
    # the project itself: its metadata and code, installed after the app is copied
    own = [p for p in ("pyproject.toml", "setup.py", "setup.cfg", "README.md", "README.rst", "LICENSE")
           if (folder / p).is_file()]
    code = [d for d in ("src", *(image_name(st.name).replace("-", "_"),)) if (folder / d).is_dir()]
    if project.get("name") and code:
        st.copy += [*own, *code]
        st.steps.append({"after": "app", "name": f"install {project['name']} itself",
                         "run": "uv pip install --no-deps ."})
        st.found.append(f"pyproject.toml: the project's own package ({', '.join(code)}) → [app] copy + a step that "
                        "installs it")
    st.found.append(f"pyproject.toml: {len(project.get('dependencies') or [])} dependencies")
    return True


def _pyproject_as_project(st: Starter, data: dict[str, Any]) -> None:
    """What ``[project]`` reads itself is only noted; the extras and groups it could install are listed."""
    project = data.get("project") or {}
    deps = project.get("dependencies") or []
    if st.project and st.project.get("path"):
        st.found.append("pyproject.toml: the uv workspace's top (its lock and members are read through [project])")
        return
    st.found.append(f"pyproject.toml: {len(deps)} dependencies, requires-python, its torch index and its own "
                    "package → [project] (read when the spec is loaded)")
    extras = sorted(project.get("optional-dependencies") or {})
    if extras:
        st.unmapped.append(f"pyproject.toml: optional dependencies ({', '.join(extras)}) are not installed; name the "
                           "ones the image needs in [project] extras")
    for index in ((data.get("tool") or {}).get("uv") or {}).get("index") or []:
        url = index.get("url") if isinstance(index, dict) else None
        if isinstance(url, str) and "download.pytorch.org" in url:  # the variant of an unpinned torch
            _index(st, url, f"pyproject.toml [[tool.uv.index]] {url}")
    scripts = project.get("scripts") or {}
    if isinstance(scripts, dict) and len(scripts) == 1:
        st.app.setdefault("command", [next(iter(scripts))])
        st.found.append(f"pyproject.toml: [project.scripts] {next(iter(scripts))} → [app] command")
    groups = sorted(data.get("dependency-groups") or {})
    if groups:
        st.unmapped.append(f"pyproject.toml: dependency groups ({', '.join(groups)}) are not installed; name the "
                           "ones the image needs in [project] groups")


def _python_for(requires: str) -> str | None:
    try:
        spec = SpecifierSet(requires)
    except Exception:
        return None
    for minor in (11, 12, 13, 10):
        if f"3.{minor}.0" in spec or f"3.{minor}.99" in spec:
            return f"3.{minor}"
    return None


# -- Dockerfile --------------------------------------------------------------------------------------

_APT_FLAGS = {"-y", "-yq", "-qq", "-q", "--yes", "--no-install-recommends", "--quiet", "-qy"}
_PIP_SKIP = {"--no-cache-dir", "-U", "--upgrade", "--user", "--no-compile", "-q", "--quiet", "--break-system-packages",
             "--system", "--pre", "--disable-pip-version-check", "--root-user-action=ignore"}


def _split_and(command: str) -> list[str]:
    """Split a RUN's shell text on top-level ``&&`` (``;`` and pipes stay inside one part)."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return [command]
    parts: list[list[str]] = [[]]
    for w in words:
        if w == "&&":
            parts.append([])
        else:
            parts[-1].append(w)
    return [shlex.join(p) for p in parts if p]


def _map_run(st: Starter, command: str, folder: Path) -> list[str]:
    """The parts of a RUN torchkiln does itself (apt, pip) go into the spec; the rest is returned."""
    rest: list[str] = []
    for part in _split_and(command):
        words = shlex.split(part)
        if not words:
            continue
        if words[:2] in (["apt-get", "update"], ["apt", "update"]) or words[:2] in (["apt-get", "clean"],):
            continue
        if words[:2] == ["rm", "-rf"] and all(w.startswith(("/var/lib/apt/lists", "/root/.cache", "/tmp/"))
                                              for w in words[2:]):
            continue
        if words[:1] in (["apt-get"], ["apt"]) and len(words) > 1 and words[1] == "install":
            pkgs = [w for w in words[2:] if w not in _APT_FLAGS and not w.startswith("-")]
            if all(re.fullmatch(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?", p) for p in pkgs):
                st.apt += pkgs
                continue
        pip = _pip_args(words)
        if pip is not None and _map_pip(st, pip, folder):
            continue
        rest.append(part)
    return rest


def _pip_args(words: list[str]) -> list[str] | None:
    for prefix in (["pip", "install"], ["pip3", "install"], ["uv", "pip", "install"],
                   ["python", "-m", "pip", "install"], ["python3", "-m", "pip", "install"]):
        if words[: len(prefix)] == prefix:
            return words[len(prefix):]
    return None


def _map_pip(st: Starter, args: list[str], folder: Path) -> bool:
    """A pip install whose every argument maps (requirements, -r files, indexes); False leaves it a step."""
    items: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in _PIP_SKIP:
            i += 1
            continue
        if a in ("-e", "--editable") and i + 1 < len(args):
            items.append(("req", args[i + 1]))
            i += 2
            continue
        if a in ("-r", "--requirement") and i + 1 < len(args):
            items.append(("req-file", args[i + 1]))
            i += 2
            continue
        if a in ("--extra-index-url", "--index-url", "-i", "--find-links", "-f") and i + 1 < len(args):
            items.append(("index", f"{a} {args[i + 1]}"))
            i += 2
            continue
        if a.startswith("-"):
            return False
        items.append(("req", a))
        i += 1
    for kind, value in items:
        if kind == "req-file":
            name = value.removeprefix("./")
            if not read_requirements(st, folder, name):
                st.unmapped.append(f"Dockerfile: pip install -r {value} (no such file in the folder)")
        elif kind == "index":
            _index(st, value.split(None, 1)[1], f"Dockerfile: pip install {value}")
        else:
            add_requirement(st, value, "Dockerfile")
    return True


def _env_pairs(value: tuple[str, ...]) -> list[tuple[str, str]]:
    """The parser gives ENV as name, value, name, value (either form of ENV, quotes kept)."""
    def unquote(v: str) -> str:
        return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v

    return [(value[i], unquote(value[i + 1])) for i in range(0, len(value) - 1, 2)]


def read_dockerfile(st: Starter, folder: Path) -> bool:
    path = folder / "Dockerfile"
    if not path.is_file():
        return False
    import dockerfile  # type: ignore[import-not-found]

    try:
        commands = dockerfile.parse_file(str(path))
    except dockerfile.GoParseError as e:
        raise InputError(f"{path}: not a Dockerfile docker can read ({e}).", hint="Fix it, or remove it and run "
                         "`kiln init --from` again.") from None
    st.sources.append("Dockerfile")
    starts = [i for i, c in enumerate(commands) if c.cmd.upper() == "FROM"]
    if len(starts) > 1:
        st.unmapped.append(f"Dockerfile: {len(starts) - 1} earlier stage(s) (torchkiln writes its own stages; only "
                           "the final stage is read)")
    final = commands[starts[-1]:] if starts else commands
    phase = "system"
    consumed: set[str] = set()
    pending_steps: list[dict[str, Any]] = []
    for c in final:
        cmd, where = c.cmd.upper(), f"Dockerfile:{c.start_line}"
        if cmd == "FROM":
            _from(st, c.value[0] if c.value else "", where)
        elif cmd == "RUN":
            before = (len(st.pip), len(st.steps))
            rest = _map_run(st, " ".join(c.value), folder)
            if len(st.pip) != before[0]:
                phase = "packages" if phase == "system" else phase
            if rest:
                pending_steps.append({"after": phase, "name": f"from {where}", "run": " && ".join(rest)})
                st.unmapped.append(f"{where}: RUN {' && '.join(rest)} → [[steps]] after {phase}")
        elif cmd in ("COPY", "ADD"):
            if any(f.startswith("--from") for f in c.flags):
                st.unmapped.append(f"{where}: {c.original} (a copy from another stage or image)")
                continue
            srcs = list(c.value[:-1])
            if cmd == "ADD" and any("://" in s for s in srcs):
                st.unmapped.append(f"{where}: {c.original} (a download: make it a [[steps]] entry with curl)")
                continue
            copied = len(st.copy)
            for s in srcs:
                rel = s.strip().removeprefix("./").rstrip("/") or "."
                if rel in (".", "*") and st.project is not None:
                    st.found.append(f"{where}: {c.original} → [project] (the project's files: its package is built "
                                    "into a wheel, a script project's files are copied into [app] workdir)")
                    phase = "app"
                elif rel in (".", "*"):
                    entries = sorted(p.name for p in folder.iterdir() if p.name not in _NOT_APP
                                     and not p.name.startswith(".") and p.name not in consumed)
                    st.copy += entries
                elif re.fullmatch(r"requirements[\w.-]*\.txt", rel):
                    consumed.add(rel)
                elif (folder / rel).exists():
                    st.copy.append(rel)
                else:
                    st.unmapped.append(f"{where}: {c.original} ({s} is not in the folder)")
            if len(st.copy) > copied:  # the app's files: a RUN after them runs after the app
                phase = "app"
        elif cmd == "WORKDIR":
            wd = c.value[0] if c.value else ""
            if wd.startswith("/"):
                st.app["workdir"] = wd
            else:
                st.unmapped.append(f"{where}: WORKDIR {wd} (not an absolute path)")
        elif cmd == "ENV":
            env = st.app.setdefault("env", {})
            for k, v in _env_pairs(c.value):
                if k in ("PATH", "PYTHONUNBUFFERED", "LANG", "DEBIAN_FRONTEND", "PIP_NO_CACHE_DIR"):
                    continue
                env[k] = v
            if not env:
                st.app.pop("env")
        elif cmd == "EXPOSE":
            for p in c.value:
                port, _, proto = p.partition("/")
                if port.isdigit() and proto in ("", "tcp"):
                    st.app.setdefault("expose", []).append(int(port))
                else:
                    st.unmapped.append(f"{where}: EXPOSE {p}")
        elif cmd == "USER":
            user = c.value[0].split(":")[0] if c.value else ""
            if re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user):
                st.app["user"] = user
            elif user not in ("1000", ""):
                st.unmapped.append(f"{where}: USER {user} (torchkiln's user has uid 1000; give a name in [app] user)")
        elif cmd in ("CMD", "ENTRYPOINT"):
            words = list(c.value) if c.json else shlex.split(" ".join(c.value))
            st.app["command" if cmd == "CMD" else "entrypoint"] = words
        elif cmd == "HEALTHCHECK":
            _healthcheck(st, c, where)
        else:
            st.unmapped.append(f"{where}: {c.original} (no [app] key takes {cmd})")
    st.steps = pending_steps + st.steps
    st.found.append(f"Dockerfile: {len(final)} instructions of its final stage")
    return True


def _from(st: Starter, image: str, where: str) -> None:
    m = _PY_IMAGE.match(image)
    if m:
        st.python = m.group(1)
        st.found.append(f"{where}: FROM {image} → [python] version {m.group(1)} (torchkiln's slim Python base)")
    elif _NGC.match(image):
        st.torch = {"source": "image"}
        st.base["image"] = image
        st.found.append(f"{where}: FROM {image} → [torch] source = \"image\" (the image's own torch is kept)")
    elif image and image != "scratch":
        st.base["image"] = image
        st.unmapped.append(f"{where}: FROM {image} → [base] image as it is: it must bring python{st.python or '3.11'} "
                           "(else set [base] python = \"apt\", or drop [base] to use torchkiln's)")


def _healthcheck(st: Starter, c: Any, where: str) -> None:
    value = list(c.value)
    if not value or value[0].upper() == "NONE":
        return
    opts = {f.split("=", 1)[0].lstrip("-"): f.split("=", 1)[1] for f in c.flags if "=" in f}
    words = value[1:] if value[0].upper() == "CMD" else value
    if not c.json:
        words = ["sh", "-c", " ".join(words)]
    hc: dict[str, Any] = {"command": words}
    for key, name in (("interval", "interval"), ("timeout", "timeout"), ("start-period", "start_period")):
        if key in opts:
            hc[name] = opts[key]
    if opts.get("retries", "").isdigit():
        hc["retries"] = int(opts["retries"])
    st.app["healthcheck"] = hc


# -- the whole -------------------------------------------------------------------------------------------


def starter_from(folder: Path, *, as_project: bool = True) -> Starter:
    """Read a repository's folder into a starter spec that resolves (see the module)."""
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder.", hint="Give the repository's folder: kiln init --from PATH.")
    st = Starter(name=image_name(folder.resolve().name))
    script = _pep723_script(folder)
    is_project = (folder / "pyproject.toml").is_file() or (folder / "uv.lock").is_file() or bool(
        _requirement_files(folder)) or script is not None
    if as_project and is_project:
        st.project = {}
        _project_table(st, folder, script)
    read = [read_pyproject(st, folder)]
    if (folder / "uv.lock").is_file():
        st.sources.append("uv.lock")
        if st.project is not None:
            st.found.append("uv.lock → [project] (installed exactly as locked, hashes checked)")
        else:
            st.found.append("uv.lock: found; its pins are not read yet (the versions come from pyproject.toml's "
                            "ranges; `kiln lock` pins the image)")
    read.append(read_dockerfile(st, folder))  # reads the requirement files its pip install -r names
    if st.project is not None and st.torch.get("source") == "image":  # [project] does not take a vendor's torch
        legacy = starter_from(folder, as_project=False)
        legacy.unmapped.insert(0, "[project] is not written: it does not take the torch of NGC's image ([torch] "
                                  "source = \"image\"); the dependencies are listed in [packages] pip instead")
        return legacy
    if st.project is None and not (folder / "pyproject.toml").is_file():  # a pyproject's list is the project's own
        read.append(read_requirements(st, folder, "requirements.txt"))
    if st.project is not None:
        read.append(True)
        _project_requirements(st, folder)
    if not any(read):
        raise InputError(
            f"{folder} holds no pyproject.toml, uv.lock, requirements*.txt, PEP 723 script or Dockerfile to start "
            "from.",
            hint="Give the folder of a Python project, or write a commented starter with `kiln init` (no --from).",
        )
    if "command" not in st.app and "entrypoint" not in st.app and script is None:
        for name in ("train.py", "main.py", "app.py", "serve.py"):
            if (folder / name).is_file():
                st.app["command"] = ["python", name]
                if name not in st.copy and st.project is None:  # [project] copies a script project's files
                    st.copy.append(name)
                break
    _make_it_resolve(st, folder)
    return st


def _requirement_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("requirements*.txt") if p.is_file())


def _pep723_script(folder: Path) -> str | None:
    """The one top-level script with a ``# /// script`` block (PEP 723), where the folder has no pyproject."""
    if (folder / "pyproject.toml").is_file():
        return None
    found = sorted(p.name for p in folder.glob("*.py") if p.is_file()
                   and re.search(r"(?m)^# /// script$", p.read_text(encoding="utf-8", errors="replace")))
    return found[0] if len(found) == 1 else None


def _project_table(st: Starter, folder: Path, script: str | None) -> None:
    """``[project] path`` (a uv workspace's top) and ``script``, where the defaults would not do."""
    assert st.project is not None
    if script is not None:
        st.project["script"] = script
        st.sources.append(script)
        st.found.append(f"{script}: PEP 723 metadata → [project] script (its dependencies; `python {script}` is the "
                        "command)")
        return
    pp = folder / "pyproject.toml"
    if not pp.is_file():
        return
    try:
        data = tomllib.loads(pp.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return  # read_pyproject says so
    uv = (data.get("tool") or {}).get("uv") or {}
    if not isinstance(uv.get("workspace"), dict) or (data.get("project") or {}).get("dependencies"):
        return
    from torchkiln.project import _load_toml, _workspace_members

    members = _workspace_members(folder, folder)
    needed: set[str] = set()
    for m in members.values():
        for dep in ((_load_toml(m / "pyproject.toml", str(m)).get("project") or {}).get("dependencies") or []):
            try:
                needed.add(canonicalize_name(Requirement(str(dep)).name))
            except InvalidRequirement:
                continue
    tops = sorted(p for n, p in members.items() if n not in needed)
    if len(tops) != 1:
        raise InputError(
            f"{folder} is a uv workspace whose top has no dependencies, and {len(tops)} of its members "
            f"({', '.join(p.relative_to(folder.resolve()).as_posix() for p in tops) or 'none'}) could be the image.",
            hint="Write kiln.toml at the workspace's top with [project] path = \"MEMBER\" (docs/project.md), or run "
                 "`kiln init` there and add it.")
    rel = tops[0].relative_to(folder.resolve()).as_posix()
    st.project["path"] = rel
    member = _load_toml(tops[0] / "pyproject.toml", rel)
    st.name = image_name(str((member.get("project") or {}).get("name") or tops[0].name))
    scripts = (member.get("project") or {}).get("scripts") or {}
    if isinstance(scripts, dict) and len(scripts) == 1:
        st.app["command"] = [next(iter(scripts))]
        st.found.append(f"{rel}/pyproject.toml: [project.scripts] {next(iter(scripts))} → [app] command")
    st.found.append(f"pyproject.toml: a uv workspace; {rel} is the member no other depends on → [project] path")


def _project_requirements(st: Starter, folder: Path) -> None:
    """``[project] requirements`` only where the Dockerfile installs others than the default requirements.txt."""
    assert st.project is not None
    root = folder / st.project.get("path", ".")
    files = list(dict.fromkeys(st.project_requirements))
    if not files and not (root / "requirements.txt").is_file() and not (root / "pyproject.toml").is_file() \
            and "script" not in st.project:
        files = [f for f in _requirement_files(root) if not re.search(r"dev|test|lint|doc", f)][:1]
    if (root / "uv.lock").is_file():
        if files:
            st.unmapped.append(f"{', '.join(files)}: not read (the uv.lock is what [project] installs)")
        return
    if files and files != ["requirements.txt"]:
        st.project["requirements"] = files
    elif not files and (root / "requirements.txt").is_file():
        st.sources.append("requirements.txt")
        st.found.append("requirements.txt → [project] (installed as pip reads it: its -r/-c includes, hashes, "
                        "PyTorch index)")


def _make_it_resolve(st: Starter, folder: Path) -> None:
    """Check the spec as ``kiln resolve`` would; apply the resolver's first checked fix where it offers one."""
    from torchkiln.knowledge import load_knowledge
    from torchkiln.lint.steps import check_steps
    from torchkiln.load import read_project_of
    from torchkiln.resolve import resolve
    from torchkiln.spec import parse_spec

    if st.torch.get("source") == "image":
        parse_spec(st.spec(), "kiln.toml (from " + str(folder) + ")")
        return  # resolved against the image's facts when it is loaded (the engine reads them)
    if st.project is not None:
        _not_twice(st, folder)
    for _ in range(3):
        spec = parse_spec(st.spec(), f"kiln.toml (from {folder})")
        try:
            check_steps(resolve(spec, load_knowledge(), project=read_project_of(spec, folder)))
            return
        except ResolveError as e:
            if not e.fixes and st.project is not None and st.python:
                # the project's torch is the project's; the Python a Dockerfile named is not: leave it to the resolver
                st.fixed.append(f"{e.message} Applied: [python] version {st.python} (from the Dockerfile) left out, "
                                "so that the resolver chooses one the project's torch has wheels for")
                st.python = None
                continue
            if not e.fixes:
                raise
            patch = e.fixes[0]
            for table, values in patch.items():
                if table == "torch" and isinstance(values, dict) and not st.project_torch:
                    st.torch.update(values)
                elif table == "python" and isinstance(values, dict):
                    st.python = values.get("version", st.python)
                elif table == "base" and isinstance(values, dict):
                    st.base.update(values)
                else:
                    raise
            st.fixed.append(f"{e.message} Applied: {patch}")
        except SpecError:
            raise


def _not_twice(st: Starter, folder: Path) -> None:
    """What the project installs itself is not written again: a torch it pins, packages it lists."""
    from torchkiln.load import read_project_of
    from torchkiln.spec import parse_spec

    facts = read_project_of(parse_spec(st.spec(), f"kiln.toml (from {folder})"), folder)
    if facts is None:
        return
    st.unmapped += [f"[project]: {n}" for n in facts.notes]
    if facts.torch is not None:
        st.project_torch = True
        dropped = {k: st.torch.pop(k) for k in ("version", "cuda") if k in st.torch}
        st.found.append(f"{facts.torch.where} → the image's torch (pinned by the project: no [torch] version)"
                        + (f"; the Dockerfile's {dropped} is left out" if dropped else ""))
    have = {r.name for r in (*facts.requirements, *facts.torch_requirements)}
    if facts.torch is not None:
        have.add(TORCH)
    companions = [c for c in st.companions if c in have]
    pip = [p for p in st.pip if _name(p) in have]
    if companions or pip:
        st.companions = [c for c in st.companions if c not in have]
        st.pip = [p for p in st.pip if _name(p) not in have]
        st.found.append(f"Dockerfile: {', '.join([*companions, *pip])} left out ([project] installs them)")


def _name(requirement: str) -> str:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return requirement


def render_starter(st: Starter, folder: Path) -> str:
    lines = [
        f"# kiln.toml written by `kiln init --from {folder}`: check it with `kiln resolve`, then `kiln build`.",
        "# Read:",
        *(f"#   {f}" for f in st.found),
    ]
    if st.fixed:
        lines += ["# Changed so that it resolves:", *(f"#   {f}" for f in st.fixed)]
    if st.unmapped:
        lines += ["# Not mapped onto a table (each RUN among them is a [[steps]] entry below):",
                  *(f"#   {u}" for u in st.unmapped)]
    blocks = []
    for table, value in st.spec().items():
        if table == "steps":  # an array of tables, one [[steps]] block each
            blocks += ["[[steps]]\n" + tomli_w.dumps(step) for step in value]
        else:
            blocks.append(tomli_w.dumps({table: value}))
    return "\n".join(lines) + "\n\n" + "\n".join(blocks)
