"""The build context on disk: the rendered files of a target plus the files they name, written whole.

The texts come from the renderers (``render.dockerfile.context_files``, ``render.apptainer.apptainer_files``:
pure); this module adds what is copied in (uv, the app files, the extension sources, the verify module)
and writes everything into a temporary folder next to the destination, swapped into place only when
all of it was written, so a failure never leaves a half-written context behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from torchkiln.building import sources as build_sources
from torchkiln.building.dockerignore import IGNORE_FILE, DockerIgnore
from torchkiln.building.emulation import MACHINE, arch_of, host_platform
from torchkiln.building.options import ApptainerOptions
from torchkiln.cache import kiln_cache_dir
from torchkiln.errors import InputError, KilnError, OutputError, SourceError, SpecError
from torchkiln.fsio import write_private
from torchkiln.matrix import ResolvedCell
from torchkiln.plan import BuildPlan
from torchkiln.render import extensions
from torchkiln.render.apptainer import DEFFILE, apptainer_files
from torchkiln.render.dockerfile import context_files
from torchkiln.render.project import context_copies as project_copies
from torchkiln.runner import Runner


def find_uv() -> Path:
    """The uv binary shipped with the host's uv package (torchkiln depends on it)."""
    try:
        from uv import find_uv_bin
    except ImportError:  # pragma: no cover - uv is a dependency
        found = shutil.which("uv")
        if found is None:
            raise InputError("the uv binary is not installed.", hint="pip install uv") from None
        return Path(found)
    return Path(find_uv_bin())


def uv_version() -> str:
    """The version of the host's uv package (the uv an image's build runs is the same release)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("uv")
    except PackageNotFoundError:  # pragma: no cover - uv is a dependency
        raise InputError("the uv package is not installed.", hint="pip install uv") from None


def uv_binary(platform: str) -> Path:
    """The uv binary a build of ``platform`` copies into its context: the host's own for the host's
    platform, else the same uv release built for the image's CPU, kept in torchkiln's cache
    (``fetch_uv`` puts it there: the host's uv cannot run in an arm64 image, not even under qemu)."""
    if platform == host_platform():
        return find_uv()
    machine = MACHINE[arch_of(platform)]
    return kiln_cache_dir() / "uv" / f"{uv_version()}-{machine}" / "bin" / "uv"


def fetch_uv(platform: str, sources: build_sources.Sources, runner: Runner) -> Path:
    """Make sure ``uv_binary(platform)`` exists: the host's uv installs uv's wheel for that CPU
    (``uv pip install --target --python-platform``) from the build's own package sources."""
    dest = uv_binary(platform)
    if dest.is_file():
        return dest
    version, machine = uv_version(), MACHINE[arch_of(platform)]
    top = dest.parent.parent
    top.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{top.name}.", dir=top.parent) as tmp:
        config = Path(tmp) / "uv.toml"
        write_private(config, build_sources.render_uv_toml(
            index_url=_host_index(sources.index_url), extra_index_urls=[_host_index(u) or u for u in
                                                                        sources.extra_index_urls],
            find_links=list(sources.find_links), index_strategy=sources.index_strategy))
        target = Path(tmp) / "target"
        runner.run(
            [str(find_uv()), "pip", "install", "--quiet", "--config-file", str(config), "--target", str(target),
             "--python-platform", f"{machine}-manylinux_2_28", "--only-binary", ":all:", "--no-deps",
             f"uv=={version}"],
            env={"SSL_CERT_FILE": sources.ca_bundle} if sources.ca_bundle else None,
            what=f"fetching uv {version} for {platform}",
            hint=(f"The {platform} image needs uv {version} built for {machine}: make uv=={version}'s {machine} wheel "
                  "reachable through the package sources (PyPI has it), or put it in a wheel folder (--find-links)."),
            error=lambda m, h, d: SourceError(m, h, details=d),
        )
        if not (target / "bin" / "uv").is_file():
            raise SourceError(f"uv {version}'s {machine} wheel held no uv binary.", hint="Check the wheel's source.")
        os.replace(target, top)
    return dest


def ensure_uv(platform: str, sources: build_sources.Sources, runner: Runner) -> None:
    """The one place a context gets a foreign CPU's uv: fetched (``fetch_uv``) when ``platform`` is
    not this machine's; the host's own uv needs nothing."""
    if platform != host_platform():
        fetch_uv(platform, sources, runner)


def _host_index(location: str | None) -> str | None:
    """An index location as the host's uv reads it: local folders as file:// URLs."""
    if location is None:
        return None
    folder = build_sources.local_folder(location)
    return folder.resolve().as_uri() if folder is not None else location


def place(src: Path, dest: Path, rel: str = "", ignore: DockerIgnore | None = None) -> None:
    """Copy a file or folder of the user's (or uv) into a context: never a hard link.

    A rendered context is the user's to read and edit (``kiln render -o DIR``, ``--context DIR``);
    a hard link would make an edit of ``DIR/train.py`` an edit of the user's own ``train.py``.
    The only hard links torchkiln makes are of wheel files into its own cache folder (see
    ``torchkiln.building.sources.link_wheels``).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        always = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")

        def skip(folder: str, names: list[str]) -> set[str]:
            left = set(always(folder, names))
            if ignore:  # the project's .dockerignore, matched on the path inside the context
                inner = Path(folder).relative_to(src).as_posix()
                base = rel if inner == "." else f"{rel}/{inner}"
                reinclude = any(p.exclusion for p in ignore.patterns)
                for name in names:
                    if ignore.excluded(f"{base}/{name}") and not (reinclude and (Path(folder) / name).is_dir()):
                        left.add(name)
            return left

        shutil.copytree(src, dest, symlinks=True, ignore=skip)
        return
    shutil.copy2(src, dest)


#: the list of what torchkiln wrote into an output folder (relative path -> sha256, or "link:TARGET")
MANIFEST = ".kiln/written.json"
#: what builds add to a context they wrote (linked wheels, apptainer's secrets and labels for the run)
_OURS_BY_NAME = ".kiln/"


def _fingerprint(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _entries(folder: Path) -> Iterator[tuple[str, Path]]:
    """Every file and symlink under ``folder``, by relative path (an iterative walk: no recursion limit)."""
    for top, dirs, files in os.walk(folder):
        base = Path(top)
        for name in files + [d for d in dirs if (base / d).is_symlink()]:
            p = base / name
            yield p.relative_to(folder).as_posix(), p


def _manifest(folder: Path) -> dict[str, str]:
    return {rel: _fingerprint(p) for rel, p in _entries(folder) if rel != MANIFEST}


def foreign_entries(out_dir: Path) -> list[str]:
    """What ``out_dir`` holds that torchkiln did not write (or that was changed since): empty when the
    folder may be replaced. A folder without torchkiln's manifest is all foreign unless it is empty."""
    if not out_dir.exists() and not out_dir.is_symlink():
        return []
    if out_dir.is_symlink() or not out_dir.is_dir():
        return [out_dir.name]
    cache = kiln_cache_dir().resolve()
    if out_dir.resolve().is_relative_to(cache) and out_dir.resolve() != cache:
        return []  # torchkiln's own cache folder (build contexts of earlier versions had no manifest)
    from torchkiln.fsio import read_text

    written: dict[str, str] = {}
    manifest = out_dir / MANIFEST
    if manifest.is_file() and not manifest.is_symlink():
        try:
            data = json.loads(read_text(manifest, what="manifest"))
            written = {str(k): str(v) for k, v in data.get("files", {}).items()}
        except (OSError, ValueError, AttributeError, KilnError):
            written = {}
    foreign: list[str] = []
    for rel, p in _entries(out_dir):
        if rel == MANIFEST and written:
            continue
        if rel not in written:
            if not (written and rel.startswith(_OURS_BY_NAME)):
                foreign.append(rel)
        elif _fingerprint(p) != written[rel]:
            foreign.append(f"{rel} (changed since torchkiln wrote it)")
        if len(foreign) >= 5:
            foreign.append("...")
            break
    if not foreign and not written and any(out_dir.iterdir()):
        foreign = [next(iter(sorted(p.name for p in out_dir.iterdir())))]
    return foreign


def refuse_foreign(out_dir: Path) -> None:
    """Raise ``OutputError`` (exit 2) when ``out_dir`` holds anything torchkiln did not write."""
    foreign = foreign_entries(out_dir)
    if foreign:
        raise OutputError(
            f"{out_dir} holds files not written by torchkiln ({', '.join(foreign)}); torchkiln replaces its output "
            "folder whole, so it will not write there. Nothing was changed.",
            hint="Give -o/--context a new or empty folder (such as a `kiln-context` folder beside the spec), or move "
                 "your files out of it first.",
        )


@contextmanager
def _swap_lock(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``folder`` itself (no lock file is left beside the user's output)."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _same_manifest(a: Path, b: Path) -> bool:
    try:
        return (a / MANIFEST).read_bytes() == (b / MANIFEST).read_bytes()
    except OSError:
        return False


@contextmanager
def replaced_folder(out_dir: Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir`` whole.

    ``out_dir`` must be new, empty, or a folder torchkiln wrote and nobody changed since (its
    ``.kiln/written.json`` lists every file): anything else is refused before anything is written
    (``refuse_foreign``), so a user's files are never removed. On any failure the temporary folder is
    removed and ``out_dir`` is left as it was, so a render never leaves a half-written folder behind.
    """
    refuse_foreign(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; builds (maybe under --fakeroot) and users read it
        yield tmp
        manifest = tmp / MANIFEST
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"written_by": "torchkiln", "files": _manifest(tmp)}, indent=1,
                                        sort_keys=True) + "\n", encoding="utf-8")
        with _swap_lock(out_dir.parent):  # one swap at a time (two builds of one spec write the same folder)
            refuse_foreign(out_dir)  # again: someone may have put a file there while the context was written
            if _same_manifest(out_dir, tmp):  # the same context (a second build of the spec): leave it in place
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = None
            if out_dir.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
                os.rename(out_dir, old / "ctx")
            os.rename(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@dataclass(frozen=True)
class ContextFiles:
    """Everything a build context holds: generated texts and the files and folders copied in."""

    texts: Mapping[str, str]  # relative path -> text (the renderers' output)
    copies: Mapping[str, Path]  # relative path -> the file or folder copied there (uv, app files, sources)
    #: the project's .dockerignore: what copying the user's folders leaves out (never torchkiln's .kiln/)
    ignore: DockerIgnore = field(default_factory=DockerIgnore)

    def to_dict(self) -> dict[str, str]:
        """Every entry of the context, by relative path: ``rendered`` or the path it is copied from."""
        return {**{rel: "rendered" for rel in self.texts}, **{rel: str(src) for rel, src in self.copies.items()}}

    def write(self, out_dir: Path) -> list[Path]:
        """Write the whole context into ``out_dir`` (replacing it, never half-written); the files written."""
        out_dir = out_dir.resolve()
        with replaced_folder(out_dir) as tmp:
            for rel, text in self.texts.items():
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
            for rel, src in self.copies.items():
                if not (tmp / rel).exists():  # an [app] copy entry inside another one is copied with it
                    ours = rel.split("/", 1)[0] == ".kiln"
                    place(src, tmp / rel, rel, None if ours else self.ignore)
        return sorted(p for p in out_dir.rglob("*") if p.is_file())


def dockerfile_context(plan: BuildPlan, spec_dir: Path) -> ContextFiles:
    """The Dockerfile's build context; the paths kiln.toml names must exist next to it."""
    ext_paths = extensions.context_paths(plan)
    missing_ext = [p for p in ext_paths if not (spec_dir / p).is_dir()]
    if missing_ext:
        raise SpecError(
            f"[[extensions]] path {missing_ext[0]!r} is not a folder next to the spec ({spec_dir}).",
            hint="An extension's path names its source tree (with setup.py or pyproject.toml), relative to the "
            "folder that holds kiln.toml.",
        )
    missing = [c for c in plan.app.copy if not (spec_dir / c).exists()]
    if missing:
        raise SpecError(
            f"[app] copy lists {', '.join(repr(m) for m in missing)}, but no such path exists next to the spec "
            f"({spec_dir}).",
            hint="Paths in [app] copy are relative to the folder that holds kiln.toml.",
        )
    reserved = {"Dockerfile", ".dockerignore", ".kiln"}
    clash = [c for c in (*plan.app.copy, *ext_paths) if Path(c).parts[0] in reserved]
    if clash:
        raise SpecError(f"[app] copy entry {clash[0]!r} clashes with a file torchkiln generates.",
                        hint="Rename or move it into a sub-folder.")
    ignore = project_ignore(spec_dir, (*plan.app.copy, *ext_paths))
    copies = {".kiln/bin/uv": uv_binary(plan.platform),
              **{f".kiln/prune/{src.name}": src for src in _prune_sources(plan)},
              **{item: spec_dir / item for item in (*plan.app.copy, *ext_paths)},
              **{rel: spec_dir / src for rel, src in project_copies(plan).items()}}
    return ContextFiles(context_files(plan), copies, ignore)


def project_ignore(spec_dir: Path, copied: Sequence[str]) -> DockerIgnore:
    """The spec folder's ``.dockerignore`` (none: nothing left out); a path the spec copies by name must
    not be one it excludes (the COPY would find nothing)."""
    path = spec_dir / IGNORE_FILE
    if not path.is_file():
        return DockerIgnore()
    ignore = DockerIgnore.parse(path.read_text(encoding="utf-8", errors="replace"))
    named = [c for c in copied if ignore.excluded(Path(c).as_posix())]
    if named:
        raise SpecError(
            f"[app] copy names {named[0]!r}, which {path} excludes.",
            hint=f"Remove it from [app] copy, or take it back in {IGNORE_FILE} with a line `!{named[0]}`.",
        )
    return ignore


def bake_context(cells: Sequence[ResolvedCell], spec_dir: Path) -> ContextFiles:
    """``docker-bake.json`` and, beside it, one Dockerfile context per cell (in the folder its target names)."""
    from torchkiln.render.bake import BAKE_FILE, render_bake, target_name

    texts: dict[str, str] = {BAKE_FILE: render_bake(cells)}
    copies: dict[str, Path] = {}
    for rc in cells:
        assert rc.plan is not None
        one = dockerfile_context(rc.plan, spec_dir)
        name = target_name(rc)
        texts.update({f"{name}/{rel}": text for rel, text in one.texts.items()})
        copies.update({f"{name}/{rel}": source for rel, source in one.copies.items()})
    return ContextFiles(texts, copies)


def write_context(plan: BuildPlan, spec_dir: Path, out_dir: Path) -> list[Path]:
    """Write the complete build context into ``out_dir`` (replacing it). Returns the files written."""
    return dockerfile_context(plan, spec_dir).write(out_dir)


def _verify_sources() -> list[Path]:
    """The verify bundle (checks.py and the stdlib-only modules beside it): ``verify.runner``'s list."""
    from torchkiln.verify.runner import bundle_sources

    return bundle_sources()


def _prune_sources(plan: BuildPlan) -> list[Path]:
    """The stdlib-only pruner and the fat-binary reader it imports, when the plan prunes (``kiln prune``)."""
    if plan.prune is None:
        return []
    import torchkiln.inspect.fatbin as fatbin
    import torchkiln.inspect.prune as prune

    return [Path(prune.__file__), Path(fatbin.__file__)]


def apptainer_context(plan: BuildPlan, spec_dir: Path, options: ApptainerOptions | None = None) -> ContextFiles:
    """``kiln.def`` and everything its ``%files`` names; the paths kiln.toml names must exist."""
    texts = apptainer_files(plan, options)  # validates the plan's values first
    local = [*plan.app.copy, *(e.path for e in plan.extensions if e.path)]
    ignore = project_ignore(spec_dir, [c for c in local if c is not None])
    missing = [c for c in local if not (spec_dir / c).exists()]
    if missing:
        raise SpecError(
            f"{', '.join(repr(m) for m in missing)} named in kiln.toml does not exist next to the spec ({spec_dir}).",
            hint="Paths in [app] copy and [[extensions]] path are relative to the folder that holds kiln.toml.",
        )
    clash = [c for c in local if Path(c).parts[0] in {DEFFILE, ".kiln"}]
    if clash:
        raise SpecError(f"{clash[0]!r} clashes with a file torchkiln generates.",
                        hint="Rename or move it into a sub-folder.")
    copies = {".kiln/bin/uv": uv_binary(plan.platform),
              **{f".kiln/verify/{src.name}": src for src in _verify_sources()},
              **{f".kiln/prune/{src.name}": src for src in _prune_sources(plan)},
              **{item: spec_dir / item for item in local if item is not None},
              **{rel: spec_dir / src for rel, src in project_copies(plan).items()}}
    return ContextFiles(texts, copies, ignore)


def write_apptainer_context(
    plan: BuildPlan, spec_dir: Path, out_dir: Path, options: ApptainerOptions | None = None
) -> list[Path]:
    """Write ``kiln.def`` and everything its ``%files`` names into ``out_dir`` (replacing it)."""
    return apptainer_context(plan, spec_dir, options).write(out_dir)
