"""The local knowledge overlay: torch releases, variants and companions learned from the configured indexes.

``kiln knowledge update`` measures what the built-in rows lack (``torchkiln.knowledge.learn``) and
writes it to ``<cache>/knowledge/overlay.json`` (``torchkiln.cache.kiln_cache_dir``; written to a
temporary file and renamed, so a reader never sees half of it). ``current_knowledge()`` is the
built-in knowledge base plus those rows; the built-in rows win wherever both say something.

Every learned row cites the wheel it was measured on (URL, credentials masked, and sha256).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from torchkiln.arch import parse_arch_list
from torchkiln.cache import kiln_cache_dir
from torchkiln.errors import InputError
from torchkiln.knowledge import (
    ArchRow,
    Companion,
    Knowledge,
    ReleasePlatform,
    TorchRelease,
    load_knowledge,
    python_key,
)

FORMAT = 1


class LearnedWheel(BaseModel):
    """One measured torch wheel: a (version, variant, platform) of one index."""

    model_config = ConfigDict(extra="forbid")

    version: str
    platform: Literal["x86_64", "aarch64"]
    #: local version label of the wheel: "" = the index's default build, else "cpu", "cu130", ...
    label: str
    #: the CUDA version in its torch/version.py ("cpu" for a CPU build)
    cuda: str
    index: str
    python: list[str]
    python_freethreaded: list[str] = Field(default_factory=list)
    arch_list: str = ""
    extra: list[str] = Field(default_factory=list)
    ptx: list[str] = Field(default_factory=list)
    filename: str
    url: str
    sha256: str
    learned: str

    @property
    def series(self) -> str:
        v = Version(self.version)
        return f"{v.major}.{v.minor}"

    @property
    def cite(self) -> str:
        return f"LEARNED ({self.url} sha256={self.sha256 or 'not given by the index'}, {self.learned[:10]})"


class LearnedCompanion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    torch: str
    package: Literal["torchvision", "torchaudio"]
    version: str
    index: str
    filename: str
    url: str
    sha256: str
    learned: str


class Overlay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = 1
    updated: str = ""
    indexes: list[str] = Field(default_factory=list)
    wheels: list[LearnedWheel] = Field(default_factory=list)
    companions: list[LearnedCompanion] = Field(default_factory=list)


def overlay_path() -> Path:
    """``$KILN_CACHE_DIR/knowledge/overlay.json`` (default ``~/.cache/torchkiln/knowledge/overlay.json``)."""
    return kiln_cache_dir() / "knowledge" / "overlay.json"


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def read_overlay(path: Path | None = None) -> Overlay:
    """The overlay at ``path`` (default: the cache's); an empty one when there is none.

    A file that is not a valid overlay is an ``InputError`` naming the file and the fix.
    """
    path = path or overlay_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Overlay()
    try:
        return Overlay.model_validate(json.loads(text))
    except (ValueError, ValidationError) as e:
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        what = (f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}" if first else str(e).splitlines()[0])
        raise InputError(
            f"the knowledge overlay {path} is corrupt ({what}).",
            hint=f"Delete it and learn again: `kiln knowledge update --reset` (or `rm {path}`); "
                 "torchkiln's built-in rows do not need it.",
        ) from None


def write_overlay(overlay: Overlay, path: Path | None = None) -> Path:
    """Write atomically: a temporary file in the same folder, then a rename over the old one."""
    path = path or overlay_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".overlay-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(overlay.model_dump_json(indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# -- built-in rows + overlay ------------------------------------------------------------------------
def _platform_of(rows: list[LearnedWheel], name: str) -> ReleasePlatform | None:
    """What a new series ships for one platform, from its learned wheels (None without a default build)."""
    newest = max((r.version for r in rows), key=Version)
    latest = [r for r in rows if r.version == newest]
    default = next((r for r in latest if r.label == ""), None) or next((r for r in rows if r.label == ""), None)
    if default is None:  # only labelled builds: what a plain install gets is unknown
        return None
    # free-threaded builds are Pythons of their own ("3.14t"), as in the built-in rows
    pythons = sorted({p for r in latest for p in (*r.python, *(f"{f}t" for f in r.python_freethreaded))},
                     key=python_key)
    on_default = {*default.python, *(f"{f}t" for f in default.python_freethreaded)}
    variants = sorted({r.cuda for r in rows if r.cuda != "cpu"}, key=lambda v: tuple(int(x) for x in v.split(".")))
    return ReleasePlatform(
        platform=name, python=tuple(pythons), python_experimental=(),
        python_index_only=tuple(p for p in pythons if p not in on_default), default_cuda=default.cuda,
        variants=tuple(variants), variants_experimental=(), source=default.cite,
    )


def apply_overlay(kb: Knowledge, overlay: Overlay, path: Path | str = "") -> Knowledge:
    """``kb`` plus the overlay's rows (pure). Built-in rows win; the overlay adds what they lack:
    new series, new patches of a known series, new variants of a known release, arch rows, companions."""
    if not overlay.wheels and not overlay.companions:
        return kb
    known = set(kb.all_patches())
    releases = {r.series: r for r in kb.releases}
    arch_rows = list(kb.arch_rows)
    by_series: dict[str, list[LearnedWheel]] = {}
    for w in overlay.wheels:
        by_series.setdefault(w.series, []).append(w)
    for series, rows in by_series.items():
        rel = releases.get(series)
        if rel is None:
            platforms = {}
            for name in ("x86_64", "aarch64"):
                plat = _platform_of([r for r in rows if r.platform == name], name) if any(
                    r.platform == name for r in rows) else None
                if plat is not None:
                    platforms[name] = plat
            if "x86_64" not in platforms:
                continue  # a release row describes x86_64 at its top level: nothing to add without it
            x86 = platforms["x86_64"]
            patches = tuple(sorted({r.version for r in rows}, key=Version))
            rel = TorchRelease(
                series=series, patches=patches, python=x86.python, python_experimental=(),
                default_cuda=x86.default_cuda, variants=x86.variants, variants_experimental=(), torchvision={},
                source=x86.source, platforms=platforms,
                learned={p: next(r.cite for r in rows if r.version == p) for p in patches},
            )
        else:
            new = sorted({r.version for r in rows if r.version not in known}, key=Version)
            platforms = dict(rel.platforms)
            for name, plat in rel.platforms.items():
                extra = sorted({r.cuda for r in rows if r.platform == name and r.cuda not in ("cpu", *plat.variants)})
                if extra:
                    platforms[name] = replace(plat, variants=tuple(plat.variants) + tuple(extra))
            learned = dict(rel.learned)
            for p in new:
                learned[p] = next(r.cite for r in rows if r.version == p)
            rel = replace(rel, patches=tuple(rel.patches) + tuple(new), platforms=platforms, learned=learned,
                          variants=platforms["x86_64"].variants if "x86_64" in platforms else rel.variants)
        releases[series] = rel
        for r in sorted(rows, key=lambda r: Version(r.version), reverse=True):
            if r.cuda == "cpu" or not r.arch_list:
                continue
            if not any(a.series == series and a.cuda == r.cuda and a.platform == r.platform for a in arch_rows):
                arch_rows.append(ArchRow(series=series, cuda=r.cuda, arch_list=r.arch_list,
                                         entries=parse_arch_list(r.arch_list), source=r.cite, platform=r.platform))
    companions = list(kb.companions)
    for c in overlay.companions:
        if kb.companion(c.package, c.torch) is None and not any(
                x.package == c.package and x.torch == c.torch for x in companions):
            companions.append(Companion(torch=c.torch, package=c.package, version=c.version,
                                        source=f"LEARNED ({c.url} sha256={c.sha256}, {c.learned[:10]})"))
    ordered = tuple(sorted(releases.values(), key=lambda r: Version(r.series)))
    return replace(kb, releases=ordered, arch_rows=tuple(arch_rows), companions=tuple(companions),
                   overlay=str(path))


_CACHED: dict[tuple[str, int, int], Knowledge] = {}


def current_knowledge(path: Path | None = None) -> Knowledge:
    """The built-in knowledge base plus the local overlay, when there is one (cached per file version)."""
    path = path or overlay_path()
    kb = load_knowledge()
    try:
        st = path.stat()
    except FileNotFoundError:
        return kb
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _CACHED:
        _CACHED.clear()
        _CACHED[key] = apply_overlay(kb, read_overlay(path), path)
    return _CACHED[key]


def learned_from(kb: Knowledge, version: str, cuda: str, platform: str) -> list[str]:
    """What of a plan comes from the overlay rather than the built-in rows (for its decision)."""
    rel = kb.release_of(version)
    out = []
    if rel is not None and version in rel.learned:
        out.append(f"torch {version}")
    row = None if cuda == "cpu" or rel is None else kb.arch_row(rel.series, cuda, platform)
    if row is not None and row.source.startswith("LEARNED"):
        out.append(f"the arch list of {rel.series if rel else version} cu{cuda.replace('.', '')} {platform}")
    builtin = load_knowledge().release_of(version)
    plat = builtin.on(platform) if builtin is not None else None
    if plat is not None and cuda != "cpu" and cuda not in plat.variants and version in (builtin.patches if builtin
                                                                                       else ()):
        out.append(f"the cu{cuda.replace('.', '')} variant")
    return out
