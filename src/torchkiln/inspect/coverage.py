"""Which target GPUs can run each CUDA binary: pure functions over fat-binary entries.

The rules are ``torchkiln.arch``'s (exact SASS, else SASS of the same major with an older or equal
minor, else PTX the driver can JIT-compile); this module only maps fat-binary entries onto them and
summarises per binary and per package.

A binary counts as covering a target when *some* entry of it runs there. Libraries such as cuBLAS
deliberately ship some kernels for a few architectures only (and dispatch at run time), so a
per-module check would flag them wrongly; every entry's ``container`` index is in the JSON for
whoever wants to look closer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from torchkiln.arch import ArchEntry, Capability, coverage
from torchkiln.inspect.fatbin import FatbinEntry

if TYPE_CHECKING:
    from torchkiln.knowledge import Knowledge

#: "no-kernels": the binary's device code holds no kernels (nvcc's device-link stub only), so
#: nothing can fail with "no kernel image" whatever the GPU
How = Literal["sass", "sass-compatible", "ptx-jit", "none", "no-kernels"]


@dataclass(frozen=True)
class Target:
    """A GPU the image should run on: the name the user gave and its compute capability."""

    label: str
    capability: Capability

    @property
    def key(self) -> str:
        return str(self.capability)

    def __str__(self) -> str:
        cap = str(self.capability)
        return cap if self.label in (cap, f"sm_{self.capability.number}") else f"{self.label} ({cap})"


@dataclass(frozen=True)
class TargetResult:
    """How one binary runs (or not) on one target."""

    target: Target
    #: the entry the driver would pick ("sm_90", "compute_90"), None = no kernel image
    entry: str | None
    how: How
    #: the entry lies in a fat binary the library embeds and loads itself (not in .nv_fatbin)
    embedded: bool = False

    @property
    def runs(self) -> bool:
        return self.how != "none"

    def to_dict(self) -> dict[str, object]:
        return {"runs": self.runs, "entry": self.entry, "how": self.how, "embedded": self.embedded}


def arch_entries(entries: Iterable[FatbinEntry]) -> list[ArchEntry]:
    """The distinct SASS and PTX entries as ``ArchEntry`` values (LTO-IR and unknown kinds never run as they are)."""
    unique = {(e.kind, e.sm, e.suffix) for e in entries if e.kind == "sass" or e.kind == "ptx"}
    return [ArchEntry(kind, Capability(sm // 10, sm % 10), suffix) for kind, sm, suffix in unique]


def _result(target: Target, archs: Sequence[ArchEntry], embedded: bool) -> TargetResult:
    c = coverage(target.capability, archs)
    how: How
    if c.entry is None:
        how = "none"
    elif c.entry.kind == "ptx":
        how = "ptx-jit"
    elif c.entry.capability == target.capability:
        how = "sass"
    else:
        how = "sass-compatible"
    return TargetResult(target, None if c.entry is None else c.entry.name, how, embedded and c.entry is not None)


def binary_coverage(
    entries: Iterable[FatbinEntry],
    targets: Sequence[Target],
    embedded: Iterable[FatbinEntry] = (),
    *,
    kernels: bool = True,
) -> tuple[TargetResult, ...]:
    """For each target, the entry a device of that capability would use, or none.

    ``embedded`` entries (fat binaries a library loads itself, see ``fatbin.read_embedded``) count
    only for targets the regular entries leave uncovered; such results are marked ``embedded``.
    With ``kernels=False`` (see ``kernels.has_kernels``) a target without an image is "no-kernels".
    """
    archs = sorted(arch_entries(entries))
    extra = sorted(set(arch_entries(embedded)) | set(archs))
    results: list[TargetResult] = []
    for t in targets:
        r = _result(t, archs, False)
        if not r.runs and extra != archs:
            r = _result(t, extra, True)
        if not r.runs and not kernels:
            r = TargetResult(t, None, "no-kernels")
        results.append(r)
    return tuple(results)


def needs_embedded(entries: Iterable[FatbinEntry], targets: Sequence[Target]) -> bool:
    """Whether some target has no kernel image among ``entries`` (so embedded ones are worth a look)."""
    return any(not r.runs for r in binary_coverage(entries, targets))


@dataclass(frozen=True)
class PackageCoverage:
    """Coverage summed over the CUDA binaries of one package (wheel, deb, conda package, or none)."""

    #: the owning distribution, None for binaries no package metadata claims
    package: str | None
    version: str | None
    binaries: int
    entries: int
    #: target key -> paths of this package's binaries that have no kernel image for it
    failing: dict[str, tuple[str, ...]]
    #: archs present in any binary of the package ("sm_80", "compute_90"), sorted
    archs: tuple[str, ...]

    def runs_everywhere(self) -> bool:
        return not any(self.failing.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "package": self.package,
            "version": self.version,
            "binaries": self.binaries,
            "entries": self.entries,
            "archs": list(self.archs),
            "targets": {
                k: {"binaries_ok": self.binaries - len(v), "failing": list(v)} for k, v in self.failing.items()
            },
        }


def arch_sort_key(name: str) -> tuple[int, int, str]:
    """Order "sm_90" < "sm_90a" < "compute_90" < "sm_100"."""
    e = ArchEntry.parse(name)
    return (e.capability.number, 1 if e.kind == "ptx" else 0, e.suffix)


def summarize_packages(
    binaries: Sequence[tuple[str | None, str | None, str, Sequence[FatbinEntry], Sequence[TargetResult]]],
    targets: Sequence[Target],
) -> tuple[PackageCoverage, ...]:
    """Group ``(package, version, path, entries, results)`` rows by package (None = no known owner)."""
    groups: dict[str | None, list[tuple[str | None, str, Sequence[FatbinEntry], Sequence[TargetResult]]]] = {}
    for pkg, ver, path, entries, results in binaries:
        groups.setdefault(pkg or None, []).append((ver, path, entries, results))
    out: list[PackageCoverage] = []
    for pkg, rows in groups.items():
        failing: dict[str, tuple[str, ...]] = {}
        for t in targets:
            failing[t.key] = tuple(
                path for _v, path, _e, results in rows for r in results if r.target == t and not r.runs
            )
        archs = {e.arch for _v, _p, entries, _r in rows for e in entries if e.kind in ("sass", "ptx")}
        versions = {v for v, _p, _e, _r in rows if v}
        out.append(
            PackageCoverage(
                package=pkg,
                version=next(iter(versions)) if len(versions) == 1 else None,
                binaries=len(rows),
                entries=sum(len(e) for _v, _p, e, _r in rows),
                failing=failing,
                archs=tuple(sorted(archs, key=arch_sort_key)),
            )
        )
    out.sort(key=lambda p: (p.package is None, p.package or ""))
    return tuple(out)


def parse_targets(texts: Iterable[str], knowledge: Knowledge) -> tuple[Target, ...]:
    """GPU names or capabilities ("H100", "8.6", "sm_120"; comma-separated allowed) -> targets.

    Unknown names raise ``ResolveError`` (from the knowledge base) with close matches. Targets with
    the same capability are merged (the first name is kept).
    """
    out: list[Target] = []
    seen: set[Capability] = set()
    for text in texts:
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            cap = knowledge.lookup_gpu(item)
            if cap in seen:
                continue
            seen.add(cap)
            out.append(Target(item, cap))
    return tuple(out)


def default_targets(knowledge: Knowledge, spec_targets: Sequence[str] | None = None) -> tuple[Target, ...]:
    """The spec's targets when it names some, else the knowledge base's standard list."""
    return parse_targets(spec_targets or knowledge.default_target_names, knowledge)
