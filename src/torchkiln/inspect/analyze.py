"""Inspect an image, a wheel or one ELF file: read it, then compute waste and GPU coverage.

This is the side-effect layer of ``kiln inspect`` (it reads files and, for an image name, reads the
layer folders of the engine's storage in place or asks the engine to export the image); everything it
computes is delegated to the pure modules
(``waste``, ``coverage``) and returned as an :class:`~torchkiln.inspect.report.InspectReport`.
"""

from __future__ import annotations

import csv
import json
import os
import posixpath
import re
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from torchkiln.errors import InputError
from torchkiln.images._io import IOStats
from torchkiln.images.archive import ImageArchive, ImageMeta, Member, is_tar
from torchkiln.inspect.coverage import Target, binary_coverage, needs_embedded, summarize_packages
from torchkiln.inspect.fatbin import (
    ELF_MAGIC,
    BinaryFile,
    FatbinEntry,
    FatbinError,
    FatbinListing,
    NotElfError,
    read_embedded,
    read_fatbins,
)
from torchkiln.inspect.kernels import has_kernels
from torchkiln.inspect.report import (
    ELF_TYPES,
    OCI_PLATFORMS,
    BinaryReport,
    ImageInfo,
    InspectReport,
    LayerReport,
    PackageSize,
    ReadInfo,
    ReportKind,
    ScanStats,
    machine_name,
)
from torchkiln.inspect.waste import FileRecord, LayerFiles, WasteReport, find_waste

if TYPE_CHECKING:
    from torchkiln.engines import StoreEngine
    from torchkiln.images.storage import StoredImage

#: the smallest file that can be an ELF file with device code (an ELF64 header alone is 64 bytes)
MIN_ELF = 64
_RECORD = re.compile(r"^(.*?)/?([^/]+)\.dist-info/RECORD$")
_DPKG_LIST = re.compile(r"^var/lib/dpkg/info/([^/]+?)(?::[^/:]+)?\.list$")
_CONDA_META = re.compile(r"^(.*?)/?conda-meta/[^/]+\.json$")
_HINT_KINDS = (
    "Give a `docker save` archive, an OCI image layout (directory or tar), a wheel (.whl), an ELF file"
    " (.so, executable), or the name of an image in the local docker/podman."
)

Owner = tuple[str, str | None]
#: how an image name is read: in place where it can be (auto), only in place, or exported
ReadMode = Literal["auto", "direct", "export"]


def _is_metadata(path: str) -> bool:
    return (
        path.endswith(".dist-info/RECORD")
        or path == "var/lib/dpkg/status"
        or (path.startswith("var/lib/dpkg/info/") and path.endswith(".list"))
        or ("conda-meta/" in path and path.endswith(".json"))
    )


def owners_from_metadata(files: dict[str, bytes], wanted: Collection[str] | None = None) -> dict[str, Owner]:
    """Map file paths to (package, version) from dist-info RECORDs, dpkg lists and conda-meta.

    ``files`` maps the metadata file's path (relative to the root) to its content. Wheels win over
    conda, conda over dpkg, when several claim a file. With ``wanted``, only those paths are looked
    up (much faster on a torch image, whose RECORDs list tens of thousands of files).
    """
    bases = None if wanted is None else {w.rsplit("/", 1)[-1] for w in wanted}

    def keep(entry: str) -> bool:
        return bases is None or entry.rsplit("/", 1)[-1] in bases

    owners: dict[str, Owner] = {}
    dpkg_versions: dict[str, str] = {}
    status = files.get("var/lib/dpkg/status")
    if status:
        name = None
        for line in status.decode("utf-8", "replace").splitlines():
            if line.startswith("Package: "):
                name = line[9:].strip()
            elif line.startswith("Version: ") and name:
                dpkg_versions[name] = line[9:].strip()
    for path, data in sorted(files.items()):
        if m := _DPKG_LIST.match(path):
            pkg = m.group(1)
            for line in data.decode("utf-8", "replace").splitlines():
                if not keep(line.strip()):
                    continue
                p = posixpath.normpath("/" + line.strip()).lstrip("/")
                if p and p != ".":
                    owners[p] = (pkg, dpkg_versions.get(pkg))
    for path, data in sorted(files.items()):
        if m := _CONDA_META.match(path):
            try:
                doc = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
                continue
            prefix = m.group(1)
            for f in doc["files"]:
                if not keep(str(f)):
                    continue
                p = posixpath.normpath(posixpath.join("/" + prefix, str(f))).lstrip("/")
                owners[p] = (str(doc.get("name")), str(doc.get("version")) if doc.get("version") else None)
    for path, data in sorted(files.items()):
        if m := _RECORD.match(path):
            parent, distinfo = m.group(1), m.group(2)
            name, _, version = distinfo.rpartition("-")
            if not name:
                name, version = distinfo, ""
            owner = (name.replace("_", "-").lower(), version or None)
            text = data.decode("utf-8", "replace")
            lines = (
                text.splitlines() if bases is None else [ln for ln in text.splitlines() if keep(ln.split(",", 1)[0])]
            )
            for row in csv.reader(lines):
                if row and row[0]:
                    p = posixpath.normpath(posixpath.join("/" + parent, row[0])).lstrip("/")
                    owners[p] = owner
    return owners


@dataclass(frozen=True)
class _Read:
    listing: FatbinListing | None
    embedded: tuple[FatbinEntry, ...] = ()
    error: str | None = None
    #: False when no container holds a kernel (nvcc's device-link stub only)
    kernels: bool = True


def _read_elf(f: BinaryFile | Path, targets: Sequence[Target], *, all_sections: bool) -> _Read:
    """List a file's fat binaries. When they leave a target uncovered, look further before saying so:
    for fat binaries embedded in other sections, then whether there are kernels at all."""
    listing = read_fatbins(f, all_sections=all_sections)
    embedded: tuple[FatbinEntry, ...] = ()
    kernels = True
    if listing.entries and needs_embedded(listing.entries, targets):
        if listing.method == "sections":
            embedded = read_embedded(f)
        if any(not r.runs for r in binary_coverage(listing.entries, targets, embedded)):
            kernels = has_kernels(f, listing.entries + embedded)
    return _Read(listing, embedded, kernels=kernels)


def _try_read_elf(f: BinaryFile, targets: Sequence[Target], *, all_sections: bool) -> _Read:
    try:
        return _read_elf(f, targets, all_sections=all_sections)
    except FatbinError as e:
        return _Read(None, error=str(e))


def _binary(
    path: str,
    size: int,
    read: _Read,
    targets: Sequence[Target],
    owner: Owner | None,
    layer: int | None,
) -> BinaryReport:
    listing, error = read.listing, read.error
    entries = listing.entries if listing else ()
    return BinaryReport(
        path=path,
        size=size,
        entries=entries,
        embedded=read.embedded,
        coverage=binary_coverage(entries, targets, read.embedded, kernels=read.kernels) if entries else (),
        package=owner[0] if owner else None,
        version=owner[1] if owner else None,
        layer=layer,
        elf_type=ELF_TYPES.get(listing.elf_type, str(listing.elf_type)) if listing else "",
        method=listing.method if listing else "",
        sections=listing.sections if listing else (),
        error=error,
        machine=machine_name(listing.machine) if listing else "",
    )


def _finish(
    kind: ReportKind,
    source: str,
    targets: Sequence[Target],
    binaries: list[BinaryReport],
    stats: ScanStats,
    *,
    image: ImageInfo | None = None,
    waste: WasteReport | None = None,
    notes: Sequence[str] = (),
    platform: str | None = None,
    machines: Collection[str] = (),
) -> InspectReport:
    binaries.sort(key=lambda b: b.path)
    rows = [(b.package, b.version, b.path, b.entries, b.coverage) for b in binaries if b.entries]
    notes = list(notes)
    if any(b.method == "scan" for b in binaries):
        notes.append(
            "Some binaries have no section headers; their fat binaries were found by a validated scan, which"
            " also lists relocatable device code and embedded kernel resources that cuobjdump would skip."
        )
    return InspectReport(
        kind=kind,
        source=source,
        targets=tuple(targets),
        binaries=tuple(binaries),
        packages=summarize_packages(rows, targets),
        image=image,
        waste=waste,
        stats=stats,
        notes=tuple(notes),
        platform=platform,
        machines=tuple(sorted(set(machines) | {b.machine for b in binaries if b.machine})),
    )


# -- single ELF file ---------------------------------------------------------------------------------
def inspect_binary(path: Path, targets: Sequence[Target], *, all_sections: bool = False) -> InspectReport:
    """One ELF file (shared object, executable or object file)."""
    t0 = time.perf_counter()
    try:
        size = path.stat().st_size
        read = _read_elf(path, targets, all_sections=all_sections)
    except NotElfError:
        raise InputError(
            f"{path} is not an ELF file (not a shared object, executable or object file).", hint=_HINT_KINDS
        ) from None
    except FatbinError as e:
        raise InputError(f"{path} is a damaged ELF file: {e}.", hint="The file is truncated or corrupt.") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}.") from None
    binaries = [_binary(str(path), size, read, targets, None, None)]
    notes = [] if read.listing and read.listing.entries else [f"{path.name} contains no CUDA device code."]
    stats = ScanStats(files=1, elf_files=1, bytes_read=0, seconds=time.perf_counter() - t0)
    machine = binaries[0].machine
    return _finish("binary", str(path), targets, binaries, stats, notes=notes, platform=OCI_PLATFORMS.get(machine))


# -- wheel -------------------------------------------------------------------------------------------
def inspect_wheel(path: Path, targets: Sequence[Target], *, all_sections: bool = False) -> InspectReport:
    """Every ELF member of a wheel (a zip); members are decompressed one at a time into a spool."""
    t0 = time.perf_counter()
    name, version = _wheel_name(path.name)
    platform = wheel_platform(path.name)
    machines: set[str] = set()
    binaries: list[BinaryReport] = []
    files = elf_files = 0
    read_s = 0.0
    nbytes = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                files += 1
                if info.file_size < MIN_ELF:
                    continue
                t = time.perf_counter()
                with zf.open(info) as member:
                    head = member.read(20)
                    if head[:4] != ELF_MAGIC:
                        read_s += time.perf_counter() - t
                        continue
                    elf_files += 1
                    if len(head) == 20:  # e_machine, in the file's own byte order
                        machines.add(machine_name(int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")))
                    with tempfile.SpooledTemporaryFile(max_size=256 << 20) as spool:
                        spool.write(head)
                        while chunk := member.read(8 << 20):
                            spool.write(chunk)
                        nbytes += info.file_size
                        read_s += time.perf_counter() - t
                        spool.seek(0)
                        read = _try_read_elf(spool, targets, all_sections=all_sections)
                if read.listing is not None and not read.listing.entries:
                    continue
                owner = (name, version) if name else None
                binaries.append(_binary(info.filename, info.file_size, read, targets, owner, None))
    except zipfile.BadZipFile as e:
        raise InputError(f"{path} is not a readable wheel/zip archive ({e}).", hint=_HINT_KINDS) from None
    except NotImplementedError as e:  # a compression method zipfile does not know
        raise InputError(f"{path} uses a zip feature wheels never use ({e}).",
                         hint="Rebuild the wheel (`pip wheel`) or download it again.") from None
    except RuntimeError as e:  # an encrypted member
        raise InputError(f"{path} holds encrypted members ({e}); a wheel is never encrypted.",
                         hint="Rebuild the wheel (`pip wheel`) or download it again.") from None
    except (EOFError, OSError, zlib.error, ValueError) as e:
        raise InputError(f"{path} is truncated, corrupt or unreadable ({e}).",
                         hint="Download the wheel again.") from None
    stats = ScanStats(files, elf_files, nbytes, time.perf_counter() - t0, read_s)
    notes = []
    want = next((m for m, p in OCI_PLATFORMS.items() if p == platform), None)
    strays = sorted(m for m in machines if m != want)
    if platform is not None and strays:
        notes.append(f"The wheel is tagged {platform}, but holds ELF files for {', '.join(strays)}.")
    return _finish("wheel", str(path), targets, binaries, stats, notes=notes, platform=platform, machines=machines)


def wheel_platform(filename: str) -> str | None:
    """The OCI platform a wheel's platform tag names ("…manylinux_2_28_aarch64.whl" -> "linux/arm64");
    None for pure wheels (``any``), other operating systems, and names that are not wheel names."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except (InvalidWheelFilename, ValueError):
        return None
    found = set()
    for tag in tags:
        plat = tag.platform
        if plat.startswith(("manylinux", "musllinux", "linux")):
            for machine, oci in OCI_PLATFORMS.items():
                if plat.endswith("_" + machine) or (machine == "i386" and plat.endswith("_i686")):
                    found.add(oci)
    return found.pop() if len(found) == 1 else None


def _wheel_name(filename: str) -> tuple[str | None, str | None]:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
        return str(name), str(version)
    except (InvalidWheelFilename, ValueError):
        return None, None


# -- image -------------------------------------------------------------------------------------------
@dataclass
class LayerScan:
    """What inspection keeps of one layer, whatever reader produced its members.

    Records carry layer index 0 until :func:`image_report` places the scan in the image's order
    (a streamed ``save`` delivers layers before the manifest that orders them).
    """

    records: list[FileRecord] = field(default_factory=list)
    whiteouts: list[tuple[str, Literal["file", "opaque"]]] = field(default_factory=list)
    #: package metadata files (dist-info RECORDs, dpkg lists, conda-meta) -> content
    metadata: dict[str, bytes] = field(default_factory=dict)
    #: ELF files with device code (or unreadable ones) -> (size, what was read)
    found: dict[str, tuple[int, _Read]] = field(default_factory=dict)
    files: int = 0
    elf_files: int = 0


def scan_layer(members: Iterable[Member], targets: Sequence[Target], *, all_sections: bool = False) -> LayerScan:
    """Read one layer's members once: their records, package metadata and CUDA binaries."""
    scan = LayerScan()
    for m in members:
        if m.whiteout is not None:
            scan.whiteouts.append((m.path, m.whiteout))
            continue
        scan.records.append(FileRecord(m.path, 0, m.type, m.size, m.linkname))
        if m.type != "file":
            continue
        scan.files += 1
        if _is_metadata(m.path):
            if m.size <= 64 << 20:
                scan.metadata[m.path] = m.read_all()
            continue
        if m.size < MIN_ELF or m.read_head(4) != ELF_MAGIC:
            continue
        scan.elf_files += 1
        with m.open_random() as f:
            read = _try_read_elf(f, targets, all_sections=all_sections)
        if read.error is not None or (read.listing is not None and read.listing.entries):
            scan.found[m.path] = (m.size, read)
    return scan


def _placed(scan: LayerScan, index: int) -> LayerFiles:
    records = (scan.records if index == 0
               else [FileRecord(r.path, index, r.type, r.size, r.linkname) for r in scan.records])
    return LayerFiles(index, records, list(scan.whiteouts))


def image_report(
    meta: ImageMeta,
    scans: Sequence[LayerScan],
    targets: Sequence[Target],
    source: str,
    stats: ScanStats,
) -> InspectReport:
    """The report of an image from its metadata and one scan per layer (in ``meta.layers`` order)."""
    layers = [_placed(scan, ref.index) for ref, scan in zip(meta.layers, scans, strict=True)]
    waste = find_waste(layers)
    final = waste.final
    live_meta = {
        p: data
        for ref, scan in zip(meta.layers, scans, strict=True)
        for p, data in scan.metadata.items()
        if p in final and final[p].layer == ref.index
    }
    found = {(ref.index, p): v for ref, scan in zip(meta.layers, scans, strict=True) for p, v in scan.found.items()}
    owners = owners_from_metadata(live_meta, wanted={p for _layer, p in found})
    binaries = []
    for (layer, p), (size, read) in found.items():
        rec = final.get(p)
        if rec is None or rec.layer != layer:
            continue  # deleted or replaced later: not in the image as it runs
        binaries.append(_binary("/" + p, size, read, targets, owners.get(p), layer))

    in_place = meta.format == "engine-storage"
    layer_reports = []
    for ref, lf in zip(meta.layers, layers, strict=True):
        layer_reports.append(
            LayerReport(
                index=ref.index,
                digest=ref.digest,
                created_by=ref.created_by,
                blob_size=None if in_place else ref.blob_size,
                compression=ref.compression,
                size=sum(r.size for r in lf.records),
                files=sum(1 for r in lf.records if r.type == "file"),
                wasted=waste.per_layer.get(ref.index, 0),
            )
        )
    info = ImageInfo(meta.format, meta.tags, meta.os, meta.architecture, None if in_place else meta.archive_size,
                     tuple(layer_reports))
    notes = []
    if waste.compiler:
        notes.append(
            f"The image has a compiler (/{waste.compiler}), so headers and static libraries are not counted as waste."
        )
    plat = f"{meta.os or 'linux'}/{meta.architecture}" if meta.architecture else None
    report = _finish("image", source, targets, binaries, stats, image=info, waste=waste, notes=notes, platform=plat)
    return replace(report, sizes=package_sizes(final, owners_from_metadata(live_meta)))


def package_sizes(final: Mapping[str, FileRecord], owners: Mapping[str, Owner]) -> tuple[PackageSize, ...]:
    """Bytes and files of the final file system per owning package (dist-info RECORDs, dpkg lists,
    conda-meta), biggest first; files no package lists count under None."""
    acc: dict[Owner | None, list[int]] = {}
    for path, rec in final.items():
        if rec.type != "file":
            continue
        a = acc.setdefault(owners.get(path), [0, 0])
        a[0] += rec.size
        a[1] += 1
    rows = [PackageSize(o[0] if o else None, o[1] if o else None, b, n) for o, (b, n) in acc.items()]
    return tuple(sorted(rows, key=lambda r: (-r.bytes, r.package or "")))


class Meter:
    """Progress of a long read on a terminal: bytes of file content covered of the total, and the
    layer being read; at most five updates a second (a message per file would cost more than the read)."""

    def __init__(self, progress: Callable[[str], None] | None, total: int, verb: str) -> None:
        self.progress, self.total, self.verb = progress, total, verb
        self.done = 0
        self.layer = ""
        self._last = 0.0

    def start_layer(self, index: int, count: int, what: str) -> None:
        what = " ".join(what.split())
        what = what if len(what) <= 60 else what[:57] + "..."
        self.layer = f"layer {index + 1}{f'/{count}' if count else ''}: {what}"
        self._emit()

    def add(self, n: int) -> None:
        self.done += n
        if self.progress is not None and time.monotonic() - self._last > 0.2:
            self._emit()

    def _emit(self) -> None:
        if self.progress is None:
            return
        self._last = time.monotonic()
        of = f" of {self.total / 1e6:,.0f}" if self.total else ""
        self.progress(f"{self.verb} {self.done / 1e6:,.0f}{of} MB; {self.layer}")

    def members(self, members: Iterable[Member]) -> Iterator[Member]:
        for m in members:
            self.add(m.size)
            yield m


def _stats(scans: Sequence[LayerScan], io_stats: IOStats, t0: float) -> ScanStats:
    return ScanStats(
        sum(s.files for s in scans), sum(s.elf_files for s in scans), io_stats.bytes_read,
        time.perf_counter() - t0, io_stats.read_seconds,
    )


def inspect_image_archive(
    path: Path,
    targets: Sequence[Target],
    *,
    tag: str | None = None,
    source: str | None = None,
    all_sections: bool = False,
    progress: Callable[[str], None] | None = None,
) -> InspectReport:
    """A docker-archive or OCI layout: layers, waste, and every CUDA binary of the final filesystem."""
    t0 = time.perf_counter()
    io_stats = IOStats()
    scans: list[LayerScan] = []
    with ImageArchive(path, tag=tag, stats=io_stats) as img:
        meta = img.meta
        meter = Meter(progress, sum(ref.blob_size for ref in meta.layers), "reading")
        for ref in meta.layers:
            meter.start_layer(ref.index, len(meta.layers), ref.created_by or ref.digest)
            scans.append(scan_layer(meter.members(img.iter_layer(ref)), targets, all_sections=all_sections))
    return image_report(meta, scans, targets, source or str(path), _stats(scans, io_stats, t0))


def inspect_stored_image(
    stored: StoredImage,
    targets: Sequence[Target],
    *,
    all_sections: bool = False,
    progress: Callable[[str], None] | None = None,
) -> InspectReport:
    """An image read in place from the engine's layer folders (:mod:`torchkiln.images.storage`)."""
    from torchkiln.images.storage import iter_layer_dir, stored_meta

    t0 = time.perf_counter()
    io_stats = IOStats()
    meta = stored_meta(stored)
    meter = Meter(progress, stored.size, f"reading {stored.engine}'s {stored.driver} storage:")
    scans: list[LayerScan] = []
    for ref, folder in zip(meta.layers, stored.layer_dirs, strict=True):
        meter.start_layer(ref.index, len(meta.layers), ref.created_by or ref.digest)
        scans.append(scan_layer(meter.members(iter_layer_dir(folder, io_stats)), targets, all_sections=all_sections))
    report = image_report(meta, scans, targets, stored.name, _stats(scans, io_stats, t0))
    return replace(report, read=ReadInfo("direct", stored.engine, stored.driver))


def inspect_image_name(
    image: str,
    targets: Sequence[Target],
    engine: StoreEngine,
    *,
    all_sections: bool = False,
    progress: Callable[[str], None] | None = None,
    read: ReadMode = "auto",
) -> InspectReport:
    """An image in the local engine: read in place from its storage where it can be (``read``
    "auto" or "direct"), else exported with ``save`` and read (``read`` "export", or the fallback)."""
    from torchkiln.images.storage import locate_in_engine

    try:
        details = engine.inspect_image(image)
    except InputError:
        raise InputError(
            f"no image {image!r} in {engine.name}, and no file of that name.",
            hint=f"Build it (`kiln build`), pull it (`{engine.name} pull {image}`), or give a path to an archive.",
        ) from None
    stored, reason = locate_in_engine(
        engine, image, details, read,
        direct_hint="Leave out `--read direct` (or give `--read export`) to export it with the engine's save.",
    )
    if stored is not None:
        return inspect_stored_image(stored, targets, all_sections=all_sections, progress=progress)
    # The export is read once from the engine's save on a pipe: no temporary copy of the image;
    # what the analysis skips is spliced to /dev/null in the kernel (torchkiln.images._io.ForwardReader).
    if progress:
        progress(f"exporting {image} with {engine.name} save" + (f" ({reason})" if reason else ""))
    with engine.save_stream(image) as fd:
        report = inspect_image_stream(
            fd, targets, source=image, tag=image, all_sections=all_sections, progress=progress, total=details.size
        )
    return replace(report, read=ReadInfo("export", engine.name, details.driver or None, reason))


# -- dispatch ----------------------------------------------------------------------------------------
def looks_like_path(arg: str) -> bool:
    """Whether a missing ``arg`` was meant as a file rather than an image name."""
    return (
        arg.startswith(("/", "./", "../", "~"))
        or arg.endswith((".tar", ".whl", ".so", ".o", ".zip", ".oci"))
        or bool(re.search(r"\.so(\.\d+)*$", arg))
        or (os.sep in arg and not re.match(r"^[a-z0-9.-]+(:\d+)?/", arg))
    )


def inspect_path(
    path: Path,
    targets: Sequence[Target],
    *,
    tag: str | None = None,
    all_sections: bool = False,
    progress: Callable[[str], None] | None = None,
) -> InspectReport:
    """Inspect an existing file or directory, choosing the reader by its content."""
    if path.is_dir():
        return inspect_image_archive(path, targets, tag=tag, all_sections=all_sections, progress=progress)
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}.") from None
    if head.startswith(ELF_MAGIC):
        return inspect_binary(path, targets, all_sections=all_sections)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return inspect_wheel(path, targets, all_sections=all_sections)
    if is_tar(head):
        return inspect_image_archive(path, targets, tag=tag, all_sections=all_sections, progress=progress)
    if head.startswith(b"\x1f\x8b") or head.startswith(b"\x28\xb5\x2f\xfd"):
        raise InputError(
            f"{path} is a compressed file; kiln inspect reads archives by random access, which compression prevents.",
            hint=f"Decompress it first (`gunzip -k {path}` or `zstd -d {path}`), or give the image name.",
        )
    if re.search(r"\.(so(\.\d+)*|o|a)$", path.name):
        start = head[:16].decode("latin-1").encode("unicode_escape").decode() if head else "nothing"
        raise InputError(
            f"{path} is not an ELF file although its name says so (it starts with {start!r}).",
            hint="Some distributions ship linker scripts named .so; point at the real library (follow the INPUT(...)"
            " line), or give an image, wheel or another ELF file.",
        )
    what = "empty" if not head else "not an image archive, OCI layout, wheel or ELF file"
    raise InputError(f"{path} is {what}.", hint=_HINT_KINDS)


def inspect_image_stream(
    stream: IO[bytes] | int,
    targets: Sequence[Target],
    *,
    source: str,
    tag: str | None = None,
    all_sections: bool = False,
    progress: Callable[[str], None] | None = None,
    total: int = 0,
) -> InspectReport:
    """A docker-archive read once from a stream (an engine's ``save`` on a pipe, as a file
    descriptor or a readable object): no temporary copy. ``total`` (the image's size, if known)
    is for the progress line."""
    from torchkiln.images.stream import read_saved_stream

    t0 = time.perf_counter()
    io_stats = IOStats()
    meter = Meter(progress, total, "reading the export:")
    count = [0]

    def layer(name: str, size: int) -> None:
        count[0] += 1
        meter.start_layer(count[0] - 1, 0, f"{name.split('/')[0][:12]} ({size / 1e6:,.0f} MB)")

    def scan(members: Iterable[Member]) -> LayerScan:
        return scan_layer(meter.members(members), targets, all_sections=all_sections)

    meta, scans = read_saved_stream(stream, source, tag, scan, io_stats, layer if progress else None)
    return image_report(meta, scans, targets, source, _stats(scans, io_stats, t0))
