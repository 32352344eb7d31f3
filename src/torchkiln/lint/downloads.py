"""How much a pip install downloads, from the table of PyPI file sizes (knowledge/wheels.toml).

KL002 weighs the cache a pip install leaves in a layer: `pip install einops` keeps a 40 KB wheel,
`pip install torch` GBs. The lint runs offline, so the sizes come from a table made from PyPI's
JSON API by scripts/refresh_wheels.py: each package's download for CPython 3.11 on Linux x86_64 and
its unconditional dependencies. An install's download is the sum over the closure of what it names,
less what the image already has (pip answers "Requirement already satisfied" for those and downloads
nothing). A package the table does not know, an extra, or a release whose dependencies PyPI does not
show (an sdist whose setup.py declares them when it runs) makes the size unknown: None, never a guess.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Wheel:
    mb: float  # the latest release's download
    max_mb: float  # the largest since 2021 (a pin to an older release)
    deps: tuple[str, ...] | None  # None: not known
    sdist: bool  # the latest release has no wheel: pip builds one (of a size nobody knows) and caches it
    pins: tuple[str, ...] = ()  # dependencies pinned to one version (vllm: torch==...)


@cache
def wheels() -> dict[str, Wheel]:
    text = resources.files("torchkiln.knowledge").joinpath("wheels.toml").read_text(encoding="utf-8")
    return {
        name: Wheel(float(row["mb"]), float(row.get("max", row["mb"])), tuple(row["deps"]) if "deps" in row else None,
                    bool(row.get("sdist", False)), tuple(row.get("pins", ())))
        for name, row in tomllib.loads(text).items()
    }


def closure(names: Iterable[str]) -> set[str] | None:
    """``names`` and every dependency they reach; None when one of them is not in the table, has
    dependencies the table does not know, or comes as an sdist only (the wheel pip builds from it and
    caches can be anything: flash-attn's is hundreds of MB)."""
    return _walk(names, strict=True)


def known_closure(names: Iterable[str]) -> set[str]:
    """What ``names`` reach through the table, stopping at what it does not know (for what an
    earlier install brought: the part the table knows is there for certain)."""
    return _walk(names, strict=False) or set()


def _walk(names: Iterable[str], strict: bool) -> set[str] | None:
    table = wheels()
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        w = table.get(name)
        if strict and (w is None or w.deps is None or w.sdist):
            return None
        seen.add(name)
        if w is not None and w.deps is not None:
            todo.extend(w.deps)
    return seen


@dataclass(frozen=True)
class Download:
    mb: float  # with the dependencies
    named: tuple[tuple[str, float], ...]  # the packages the command names that it downloads, largest first
    #: a pinned package is counted at its largest size since 2021 (or its newest): the figure is an
    #: upper bound, as an old release's files are often smaller (opencv-python 4.2's wheel is 28 MB,
    #: 4.10's 74-88 MB)
    upper: bool = False


#: packages built against one torch release (torchvision and torchaudio, and CUDA extensions whose
#: wheels are tied to a torch release: most of knowledge/extensions.toml's, PyG's, the serving
#: engines'): installed into an image that has torch, each release wants its own torch, and pip
#: replaces the image's with it when they differ, so what is downloaded is not known
TORCH_BOUND = frozenset({"torchvision", "torchaudio", "xformers", "flash-attn", "flash-attn-3", "apex",
                         "mmcv", "mmcv-full", "torch-scatter", "torch-sparse", "torch-cluster", "pyg-lib",
                         "torch-spline-conv", "detectron2", "pytorch3d", "kaolin", "vllm", "sglang",
                         "flashinfer-python", "mamba-ssm", "causal-conv1d", "transformer-engine"})


def download(names: Iterable[str], have: set[str], fresh: Iterable[str] = (), pinned: Iterable[str] = ()
             ) -> Download | None:
    """What installing ``names`` downloads when the image already has ``have``: the closure less
    ``have``, except the packages of ``fresh`` (named with --upgrade: pip fetches their newest
    release). A package of ``pinned`` (a version pin or an upper bound) counts at its largest size
    since 2021. None when the size cannot be known (see the module docstring), and when a package
    pins (or, from ``TORCH_BOUND``, is built against) a version of something the image has already:
    pip may download that again."""
    wanted = set(names)
    reach = closure(wanted)
    if reach is None:
        return None
    table = wheels()
    for n in reach - have:
        bound = set(table[n].pins) | ({"torch"} if n in TORCH_BOUND else set())
        if bound & have:
            return None
    fresh, pinned = set(fresh), set(pinned)
    got = sorted(((n, table[n].max_mb if n in pinned else table[n].mb) for n in reach if n not in have or n in fresh),
                 key=lambda x: -x[1])
    upper = any(n in pinned for n, _ in got)  # a pin's own files are rarely larger than the newest
    return Download(round(sum(mb for _, mb in got), 1), tuple((n, mb) for n, mb in got if n in wanted), upper)
