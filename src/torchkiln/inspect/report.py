"""The result of ``kiln inspect``: frozen dataclasses and their JSON form (a stable contract).

JSON shape (``InspectReport.to_dict``)::

    {
      "kind": "image" | "wheel" | "binary",
      "source": "...",
      "platform": "linux/amd64" | "linux/arm64" | ... | null,
      "machines": ["x86_64", "aarch64", ...],
      "targets": [{"name": "H100", "capability": "9.0"}, ...],
      "read": {"path": "direct" | "export" | "file", "engine": "docker" | "podman" | null,
               "storage": "overlay2" | "overlay" | null, "reason": WHY-EXPORT | null},
      "image": {format, tags, os, architecture, archive_size, size, layers: [
                 {index, digest, created_by, blob_size, compression, size, files, wasted}]} | null,
      "waste": {"total": N, "compiler": PATH | null, "categories": [
                 {category, title, bytes, files, items_total, items: [{path, bytes, files, layer, removed_in}]}]}
               | null,
      "binaries": [{path, package, version, layer, size, elf_type, machine, method, sections, error,
                    "entries": [{kind: "sass"|"ptx", arch: "sm_90"|"sm_90a"|"compute_90", compressed, ...}],
                    "other_entries": [...LTO-IR and unknown kinds...],
                    "embedded": {sections, entries, other_entries, archs} | null,
                    "coverage": {"9.0": {runs, entry, how, embedded}}, "failing": ["9.0", ...]}],
      "packages": [{package, version, binaries, entries, archs, targets: {"9.0": {binaries_ok, failing}}}],
      "sizes": [{package, version, bytes, files}],  (images: biggest first; package null: owned by none)
      "summary": {files, elf_files, cuda_binaries, entries, failing_binaries, wasted, errors},
      "notes": ["..."]
    }

``read`` says how the input was read: ``file`` (a path), ``direct`` (an image name read in place from
the engine's layer folders) or ``export`` (an image name exported with the engine's ``save``;
``reason`` says why it was not read in place, null when ``--read export`` asked for it). Read
directly, ``image.format`` is ``engine-storage`` and ``archive_size`` and each ``blob_size`` are null
(no archive exists); everything else is what the export of the same image reports.

``entries`` holds only SASS and PTX; ``arch`` is ``sm_XY[a|f]`` for SASS and ``compute_XY[a|f]`` for
PTX. Paths inside images are absolute ("/usr/lib/..."); inside wheels they are the wheel's member
names. ``platform`` is the image's ``os/architecture`` (its config), a wheel's from its platform tag
(null for ``any``), an ELF file's from its ELF machine; ``machines`` lists the CPU architectures of
the ELF files read (``e_machine``: an aarch64 wheel holds aarch64 code, whatever its fat binaries hold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from torchkiln.inspect.coverage import PackageCoverage, Target, TargetResult
from torchkiln.inspect.fatbin import FatbinEntry
from torchkiln.inspect.waste import WasteReport

ReportKind = Literal["image", "wheel", "binary"]

ELF_TYPES = {1: "relocatable", 2: "executable", 3: "shared object", 4: "core"}
#: ELF e_machine -> the machine name ``uname -m`` prints
ELF_MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64", 183: "aarch64",
                243: "riscv64"}
#: machine -> OCI platform
OCI_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "i386": "linux/386", "ppc64": "linux/ppc64le",
                 "s390x": "linux/s390x", "arm": "linux/arm", "riscv64": "linux/riscv64"}


def machine_name(e_machine: int) -> str:
    """ELF e_machine -> "x86_64", "aarch64", … ("e_machine N" for others)."""
    return ELF_MACHINES.get(e_machine, f"e_machine {e_machine}")


@dataclass(frozen=True)
class BinaryReport:
    """One CUDA binary (an ELF file with device code), or an ELF file that could not be read."""

    path: str
    size: int
    entries: tuple[FatbinEntry, ...]
    coverage: tuple[TargetResult, ...]
    package: str | None = None
    version: str | None = None
    layer: int | None = None
    elf_type: str = ""
    #: "sections" or "scan" (section headers stripped), "" when unreadable
    method: str = ""
    sections: tuple[str, ...] = ()
    error: str | None = None
    #: fat binaries found in other data sections (the library loads them itself), when looked for
    embedded: tuple[FatbinEntry, ...] = ()
    #: the CPU architecture of the ELF file ("x86_64", "aarch64"), "" when unreadable
    machine: str = ""

    @property
    def device_entries(self) -> tuple[FatbinEntry, ...]:
        return tuple(e for e in self.entries if e.kind in ("sass", "ptx"))

    @property
    def failing(self) -> tuple[Target, ...]:
        return tuple(r.target for r in self.coverage if not r.runs)

    @property
    def archs(self) -> tuple[str, ...]:
        from torchkiln.inspect.coverage import arch_sort_key

        return tuple(sorted({e.arch for e in self.device_entries}, key=arch_sort_key))

    def _embedded_dict(self) -> dict[str, object] | None:
        if not self.embedded:
            return None
        from torchkiln.inspect.coverage import arch_sort_key

        device = [e for e in self.embedded if e.kind in ("sass", "ptx")]
        return {
            "sections": sorted({e.section for e in self.embedded}),
            "entries": len(device),
            "other_entries": len(self.embedded) - len(device),
            "archs": sorted({e.arch for e in device}, key=arch_sort_key),
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "package": self.package,
            "version": self.version,
            "layer": self.layer,
            "size": self.size,
            "elf_type": self.elf_type,
            "machine": self.machine,
            "method": self.method,
            "sections": list(self.sections),
            "error": self.error,
            "archs": list(self.archs),
            "entries": [e.to_dict() for e in self.device_entries],
            "other_entries": [e.to_dict() for e in self.entries if e.kind not in ("sass", "ptx")],
            "embedded": self._embedded_dict(),
            "coverage": {r.target.key: r.to_dict() for r in self.coverage},
            "failing": [t.key for t in self.failing],
        }


@dataclass(frozen=True)
class ReadInfo:
    """How the input was read (see the module docstring)."""

    path: Literal["direct", "export", "file"] = "file"
    engine: str | None = None
    storage: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "engine": self.engine, "storage": self.storage, "reason": self.reason}


@dataclass(frozen=True)
class LayerReport:
    index: int
    digest: str
    created_by: str | None
    #: bytes of the layer as stored in the archive; None when read in place (no archive)
    blob_size: int | None
    compression: str
    #: bytes of the regular files in the layer (uncompressed content)
    size: int
    files: int
    #: wasted bytes stored in this layer
    wasted: int

    def to_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "digest": self.digest,
            "created_by": self.created_by,
            "blob_size": self.blob_size,
            "compression": self.compression,
            "size": self.size,
            "files": self.files,
            "wasted": self.wasted,
        }


@dataclass(frozen=True)
class ImageInfo:
    format: str
    tags: tuple[str, ...]
    os: str | None
    architecture: str | None
    #: bytes of the archive; None when read in place from the engine's storage
    archive_size: int | None
    layers: tuple[LayerReport, ...]

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.format,
            "tags": list(self.tags),
            "os": self.os,
            "architecture": self.architecture,
            "archive_size": self.archive_size,
            "size": self.size,
            "layers": [layer.to_dict() for layer in self.layers],
        }


@dataclass(frozen=True)
class ScanStats:
    """How much was looked at, and where the time went (for ``bench/``)."""

    files: int = 0
    elf_files: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    read_seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "elf_files": self.elf_files,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "read_seconds": round(self.read_seconds, 3),
        }


@dataclass(frozen=True)
class PackageSize:
    """What one package (a Python distribution, a Debian or conda package) takes in the image as it runs:
    the bytes and count of its files in the final file system; ``package`` None for files no package owns."""

    package: str | None
    version: str | None
    bytes: int
    files: int

    def to_dict(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version, "bytes": self.bytes, "files": self.files}


@dataclass(frozen=True)
class InspectReport:
    kind: ReportKind
    source: str
    targets: tuple[Target, ...]
    binaries: tuple[BinaryReport, ...]
    packages: tuple[PackageCoverage, ...]
    image: ImageInfo | None = None
    waste: WasteReport | None = None
    stats: ScanStats = field(default_factory=ScanStats)
    notes: tuple[str, ...] = ()
    read: ReadInfo = field(default_factory=ReadInfo)
    #: "linux/arm64": the image's, the wheel's platform tag's, the ELF file's (None: any / unknown)
    platform: str | None = None
    #: CPU architectures of the ELF files read (sorted)
    machines: tuple[str, ...] = ()
    #: images: every package's share of the final file system, biggest first ("what is big")
    sizes: tuple[PackageSize, ...] = ()

    @property
    def failing(self) -> tuple[BinaryReport, ...]:
        return tuple(b for b in self.binaries if b.failing)

    @property
    def errors(self) -> tuple[BinaryReport, ...]:
        return tuple(b for b in self.binaries if b.error)

    def to_dict(self, max_waste_items: int | None = 200) -> dict[str, object]:
        waste: dict[str, object] | None = None
        if self.waste is not None:
            waste = {
                "total": self.waste.total,
                "compiler": None if self.waste.compiler is None else "/" + self.waste.compiler,
                "categories": [c.to_dict(max_waste_items) for c in self.waste.categories],
            }
        return {
            "kind": self.kind,
            "source": self.source,
            "platform": self.platform,
            "machines": list(self.machines),
            "targets": [{"name": t.label, "capability": t.key} for t in self.targets],
            "read": self.read.to_dict(),
            "image": None if self.image is None else self.image.to_dict(),
            "waste": waste,
            "binaries": [b.to_dict() for b in self.binaries],
            "packages": [p.to_dict() for p in self.packages],
            "sizes": [s.to_dict() for s in self.sizes],
            "summary": {
                "files": self.stats.files,
                "elf_files": self.stats.elf_files,
                "cuda_binaries": sum(1 for b in self.binaries if b.entries),
                "entries": sum(len(b.device_entries) for b in self.binaries),
                "failing_binaries": len(self.failing),
                "wasted": None if self.waste is None else self.waste.total,
                "errors": len(self.errors),
            },
            "notes": list(self.notes),
        }
