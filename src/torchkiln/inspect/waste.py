"""Wasted bytes in an image: pure functions over the file lists of its layers.

Two kinds of waste:

* **Hidden bytes**: a file *deleted* (whiteout) or *overwritten* (same path, or a directory that a
  later layer replaces) by a later layer still ships in its own layer.
* **Unneeded files in the final filesystem**, each counted once, in this order: pip / uv / conda
  package caches; apt lists and downloaded ``.deb`` files; ``__pycache__`` folders outside every
  Python environment (venvs, conda prefixes, interpreter ``lib/python3.X`` trees: bytecode left by
  build steps); ``test``/``tests`` folders of big packages (50 MiB or more in site-packages); in a
  *runtime* image (one without a compiler: no gcc, g++, cc, c++, clang or nvcc in a ``bin``
  folder) static libraries and C/C++/CUDA headers; and CUDA libraries present twice, once from a
  system toolkit and once from the ``nvidia-*`` wheels (the system copy is counted: torch loads
  the wheels').

Whiteout semantics follow the OCI image spec: ``.wh.NAME`` removes NAME (and everything under it)
from the layers below; ``.wh..wh..opq`` in a folder hides everything the layers below put in it.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

FileType = Literal["file", "dir", "symlink", "hardlink", "other"]

#: category -> what it is, for reports (the order is the order of the report)
CATEGORIES: dict[str, str] = {
    "deleted": "deleted by a later layer (the bytes stay in the earlier layer)",
    "overwritten": "replaced by a later layer (the earlier copy stays)",
    "pip-cache": "pip cache",
    "uv-cache": "uv cache",
    "conda-cache": "conda package cache",
    "apt-lists": "apt package lists",
    "apt-cache": "apt downloaded packages and caches",
    "pycache": "__pycache__ outside every Python environment",
    "tests": "test folders of big Python packages",
    "static-libs": "static libraries in a runtime image (no compiler)",
    "headers": "headers in a runtime image (no compiler)",
    "duplicate-cuda": "CUDA libraries present twice (system toolkit and nvidia-* wheels)",
}

BIG_PACKAGE = 50 << 20

_PIP = re.compile(r"(?:^|/)\.cache/pip/")
_UV = re.compile(r"(?:^|/)\.cache/uv/")
_CONDA_HOME = re.compile(r"(?:^|/)\.conda/pkgs/")
_APT_LISTS = "var/lib/apt/lists/"
_APT_CACHE = re.compile(r"^var/cache/apt/(?:archives/.+\.deb|[^/]+\.bin)$")
_PY_LIB = re.compile(r"(?:^|/)lib/python3(?:\.\d+)?/")
_SITE = re.compile(r"^(.*?/(?:site|dist)-packages)/([^/]+)(/.*)?$")
_COMPILER = re.compile(
    r"^(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|nvcc)(?:-\d+(?:\.\d+)*)?$|^\w+-linux-gnu-(?:gcc|g\+\+)(?:-\d+)?$"
)
_HEADER_EXT = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc", ".tcc")
_CUDA_LIB = re.compile(
    r"^(lib(?:cublas|cublasLt|cudart|cudnn\w*|cufft|cufftw|cufile\w*|curand|cusolver|cusolverMg|cusparse"
    r"|cusparseLt|nccl|nvrtc|nvrtc-builtins\w*|nvJitLink|nvToolsExt|nvjpeg|npp\w+|nvshmem\w*|cupti|nvperf_\w+"
    r"|nvblas|nvptxcompiler\w*))\.so(?:\.[\d.]+)?$"
)


@dataclass(frozen=True)
class FileRecord:
    """One entry of one layer (whiteouts excluded)."""

    path: str  # relative to the root, no leading "/"
    layer: int
    type: FileType
    size: int  # content bytes for regular files, else 0
    linkname: str = ""


@dataclass
class LayerFiles:
    """What one layer holds: its entries and its whiteouts (path, "file" | "opaque")."""

    index: int
    records: list[FileRecord] = field(default_factory=list)
    whiteouts: list[tuple[str, Literal["file", "opaque"]]] = field(default_factory=list)


@dataclass(frozen=True)
class WasteItem:
    category: str
    path: str
    bytes: int
    files: int
    #: the layer holding the bytes
    layer: int
    #: the layer that deleted or overwrote them (hidden bytes only)
    removed_in: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "path": "/" + self.path,
            "bytes": self.bytes,
            "files": self.files,
            "layer": self.layer,
            "removed_in": self.removed_in,
        }


@dataclass(frozen=True)
class WasteCategory:
    name: str
    title: str
    bytes: int
    files: int
    items: tuple[WasteItem, ...]  # biggest first

    def to_dict(self, max_items: int | None = 200) -> dict[str, object]:
        items = self.items if max_items is None else self.items[:max_items]
        return {
            "category": self.name,
            "title": self.title,
            "bytes": self.bytes,
            "files": self.files,
            "items_total": len(self.items),
            "items": [i.to_dict() for i in items],
        }


@dataclass(frozen=True)
class WasteReport:
    categories: tuple[WasteCategory, ...]
    #: the files the image shows at run time: path -> record of the layer that wins
    final: dict[str, FileRecord]
    #: layer index -> wasted bytes stored in that layer
    per_layer: dict[int, int]
    #: a compiler found in the image (then headers and static libraries are not counted as waste)
    compiler: str | None

    @property
    def total(self) -> int:
        return sum(c.bytes for c in self.categories)

    def category(self, name: str) -> WasteCategory | None:
        return next((c for c in self.categories if c.name == name), None)


class _Acc:
    """Accumulates items keyed by (category, group path, layer, removed_in)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, int, int | None], list[int]] = {}

    def add(self, category: str, group: str, rec: FileRecord, removed_in: int | None = None) -> None:
        slot = self.groups.setdefault((category, group, rec.layer, removed_in), [0, 0])
        slot[0] += rec.size
        slot[1] += 1


def _under(sorted_keys: list[str], prefix: str) -> list[str]:
    """Keys equal to ``prefix`` or below ``prefix/`` in a sorted list."""
    out: list[str] = []
    if not prefix:
        return list(sorted_keys)
    i = bisect.bisect_left(sorted_keys, prefix)
    if i < len(sorted_keys) and sorted_keys[i] == prefix:
        out.append(prefix)
    lo = bisect.bisect_left(sorted_keys, prefix + "/")
    hi = bisect.bisect_left(sorted_keys, prefix + "0")  # "0" sorts right after "/"
    out.extend(sorted_keys[lo:hi])
    return out


def merge_layers(layers: Sequence[LayerFiles], acc: _Acc | None = None) -> dict[str, FileRecord]:
    """Apply the layers in order; return the final view, recording hidden bytes in ``acc``."""
    final: dict[str, FileRecord] = {}
    for layer in layers:
        if layer.whiteouts:
            keys = sorted(final)
            for path, kind in layer.whiteouts:
                hit = _under(keys, path)
                if kind == "opaque":
                    hit = [k for k in hit if k != path]
                for k in hit:
                    rec = final.pop(k, None)
                    if rec is not None and rec.type == "file" and acc is not None:
                        acc.add("deleted", path if kind == "file" else path + "/", rec, layer.index)
        replaced_dirs: list[str] = []
        for rec in layer.records:
            old = final.get(rec.path)
            if old is not None and old.layer != layer.index:
                if old.type == "file" and acc is not None:
                    acc.add("overwritten", rec.path, old, layer.index)
                elif old.type == "dir" and rec.type != "dir":
                    replaced_dirs.append(rec.path)
            final[rec.path] = rec
        if replaced_dirs:
            keys = sorted(final)
            for d in replaced_dirs:
                for k in _under(keys, d):
                    if k == d:
                        continue
                    rec = final[k]
                    if rec.layer == layer.index:
                        continue
                    del final[k]
                    if rec.type == "file" and acc is not None:
                        acc.add("deleted", d, rec, layer.index)
    return final


def _roots(final: dict[str, FileRecord]) -> tuple[list[str], list[str]]:
    """(venv roots, conda prefixes) of the final filesystem."""
    venvs: list[str] = []
    condas: set[str] = set()
    for path in final:
        base = posixpath.basename(path)
        if base == "pyvenv.cfg":
            venvs.append(posixpath.dirname(path))
        elif "/conda-meta/" in "/" + path + "/" and path.endswith(".json"):
            condas.add(path[: path.index("conda-meta/")].rstrip("/"))
    return venvs, sorted(condas)


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(r == "" or path == r or path.startswith(r + "/") for r in roots)


def has_compiler(final: dict[str, FileRecord]) -> str | None:
    """The path of a C/C++/CUDA compiler in the image, if any."""
    for path, rec in final.items():
        if rec.type in ("file", "symlink", "hardlink") and posixpath.basename(posixpath.dirname(path)) == "bin":
            if _COMPILER.match(posixpath.basename(path)):
                return path
    return None


def find_waste(layers: Sequence[LayerFiles]) -> WasteReport:
    """Merge the layers and classify every wasted byte (see the module docstring)."""
    acc = _Acc()
    final = merge_layers(layers, acc)
    venvs, condas = _roots(final)
    compiler = has_compiler(final)

    files = [(path, rec) for path, rec in final.items() if rec.type == "file"]
    # site-packages location of each file (or None), and the sizes of top-level packages there
    site: dict[str, re.Match[str] | None] = {}
    pkg_size: dict[tuple[str, str], int] = {}
    for path, rec in files:
        m = _SITE.match(path) if "-packages/" in path else None
        site[path] = m
        if m and m.group(3):
            key = (m.group(1), m.group(2))
            pkg_size[key] = pkg_size.get(key, 0) + rec.size
    envs = venvs + condas

    cuda_libs: dict[str, list[FileRecord]] = {}
    for path, rec in files:
        if rec.size == 0:
            continue
        base = path.rsplit("/", 1)[-1]
        if ".cache/" in path and (m := _PIP.search(path)):
            acc.add("pip-cache", path[: m.end() - 1], rec)
        elif ".cache/" in path and (m := _UV.search(path)):
            acc.add("uv-cache", path[: m.end() - 1], rec)
        elif "pkgs/" in path and (m := _CONDA_HOME.search(path)):
            acc.add("conda-cache", path[: m.end() - 1], rec)
        elif condas and "pkgs/" in path and (root := _conda_pkgs(path, condas)) is not None:
            acc.add("conda-cache", root, rec)
        elif path.startswith(_APT_LISTS):
            acc.add("apt-lists", path, rec)
        elif path.startswith("var/cache/apt/") and _APT_CACHE.match(path):
            acc.add("apt-cache", path, rec)
        elif "__pycache__/" in path and _is_stray_pycache(path, envs):
            acc.add("pycache", path[: ("/" + path).index("/__pycache__/") + len("__pycache__")], rec)
        elif (sm := site[path]) is not None and (t := _tests_dir(sm, pkg_size)) is not None:
            acc.add("tests", t, rec)
        elif compiler is None and base.endswith(".a"):
            acc.add("static-libs", path, rec)
        elif compiler is None and base.endswith(_HEADER_EXT) and (inc := _include_dir(path)) is not None:
            acc.add("headers", inc, rec)
        elif base.startswith("lib") and ".so" in base and (cm := _CUDA_LIB.match(base)):
            cuda_libs.setdefault(cm.group(1), []).append(rec)

    for recs in cuda_libs.values():
        wheel = [r for r in recs if _SITE.match(r.path) and "/nvidia/" in r.path]
        system = [r for r in recs if not _SITE.match(r.path)]
        if wheel and system:
            for r in system:
                acc.add("duplicate-cuda", r.path, r)

    by_cat: dict[str, list[WasteItem]] = {}
    per_layer: dict[int, int] = {}
    for (cat, group, layer, removed_in), (nbytes, nfiles) in acc.groups.items():
        if nbytes == 0:
            continue
        by_cat.setdefault(cat, []).append(WasteItem(cat, group, nbytes, nfiles, layer, removed_in))
        per_layer[layer] = per_layer.get(layer, 0) + nbytes
    cats = []
    for name, title in CATEGORIES.items():
        items = sorted(by_cat.get(name, []), key=lambda i: (-i.bytes, i.path))
        if items:
            cats.append(
                WasteCategory(name, title, sum(i.bytes for i in items), sum(i.files for i in items), tuple(items))
            )
    return WasteReport(tuple(cats), final, per_layer, compiler)


def _conda_pkgs(path: str, condas: Sequence[str]) -> str | None:
    for root in condas:
        pkgs = f"{root}/pkgs/" if root else "pkgs/"
        if path.startswith(pkgs):
            return pkgs.rstrip("/")
    return None


def _is_stray_pycache(path: str, envs: Sequence[str]) -> bool:
    return "/__pycache__/" in "/" + path and not _PY_LIB.search(path) and not _inside(path, envs)


def _tests_dir(m: re.Match[str], pkg_size: dict[tuple[str, str], int]) -> str | None:
    if not m.group(3):
        return None
    if pkg_size.get((m.group(1), m.group(2)), 0) < BIG_PACKAGE:
        return None
    parts = m.group(3).strip("/").split("/")[:-1]  # folders below the package, not the file name
    for i, part in enumerate(parts):
        if part in ("tests", "test"):
            return f"{m.group(1)}/{m.group(2)}/" + "/".join(parts[: i + 1])
    return None


def _include_dir(path: str) -> str | None:
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "include":
            return "/".join(parts[: i + 1])
    return None
