"""``kiln export``: a built image as a docker-archive, an OCI archive, or a ready ``.sif``.

Sites that build with Docker and run with Apptainer need the image as a file:

* ``docker-archive`` — what the engine's ``save`` writes (``docker save`` / ``podman save``);
* ``oci-archive``    — an OCI image layout in a tar (:mod:`torchkiln.images.oci`), converted from the
  docker-archive by copying each blob once (its digest checked on the way);
  ``apptainer build X.sif oci-archive:FILE`` reads it;
* ``sif``            — a SIF file written by :mod:`torchkiln.images.sif` without apptainer: the layers
  are flattened in order into a root file system (:mod:`torchkiln.images.flatten`), apptainer's
  ``/.singularity.d`` layout is added, ``mksquashfs`` squashes it and the SIF objects are written
  around it.

The tools a format needs (``mksquashfs`` for sif) are looked for before the image is saved, so a
missing tool fails in a second, not after minutes of work (:class:`~torchkiln.errors.ToolMissingError`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from torchkiln.errors import FilesError, InputError, ToolMissingError
from torchkiln.images.archive import ImageArchive, open_image
from torchkiln.images.confine import rmtree
from torchkiln.images.flatten import FlattenStats, export_budget, flatten, free_bytes
from torchkiln.images.oci import write_oci_archive
from torchkiln.images.sif import MKSQUASHFS_HINT, ImageConfig, SifImage, write_image_sif
from torchkiln.runner import Runner

ExportFormat = Literal["docker-archive", "oci-archive", "sif"]
FORMATS: tuple[ExportFormat, ...] = ("docker-archive", "oci-archive", "sif")


class Saver(Protocol):
    """What export needs from an engine (an ``ImageStore`` of ``torchkiln.engines`` has it): a docker-archive writer."""

    @property
    def name(self) -> str: ...

    def save(self, image: str, dest: Path) -> Path: ...


@dataclass(frozen=True)
class ExportResult:
    image: str
    format: ExportFormat
    path: Path
    size: int
    seconds: float
    layers: int
    #: the command that turns ``path`` into a .sif on a machine with apptainer (None for a .sif)
    apptainer_command: str | None
    sif: dict[str, Any] | None = None
    stats: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "format": self.format,
            "path": str(self.path),
            "size_bytes": self.size,
            "seconds": round(self.seconds, 2),
            "layers": self.layers,
            "apptainer_command": self.apptainer_command,
            "sif": self.sif,
            "flatten": self.stats or None,
        }


def sif_name_for(image: str) -> str:
    """``acme/trainer:2024.11`` → ``trainer_2024.11.sif``."""
    name = image.rsplit("/", 1)[-1]
    base, _, tag = name.partition(":")
    return f"{base}_{tag}.sif" if tag else f"{base}.sif"


def apptainer_build_command(archive: Path, fmt: ExportFormat, image: str) -> str | None:
    """The exact command that builds a .sif from an exported archive."""
    if fmt == "sif":
        return None
    return shlex.join(["apptainer", "build", sif_name_for(image), f"{fmt}:{archive}"])


# -- the whole export -------------------------------------------------------------------------------------


def deffile_for(image: str) -> str:
    """The definition a SIF converted from a local Docker image carries (what rebuilds it with apptainer)."""
    return f"Bootstrap: docker-daemon\nFrom: {image}\n"


def export_archive_to_sif(
    image: ImageArchive, dest: Path, name: str, runner: Runner, *, processors: int | None = None,
    work_dir: Path | None = None, progress: Callable[[str], None] | None = None,
) -> tuple[SifImage, FlattenStats]:
    """Flatten an opened image into a temporary root next to ``dest`` and write the SIF."""
    say = progress or (lambda _msg: None)
    config = ImageConfig.from_json(image.meta.config)
    layers = image.meta.layers
    with tempfile.TemporaryDirectory(prefix=".kiln-rootfs-", dir=work_dir or dest.parent) as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        try:
            stats = flatten(
                (image.layer_stream(ref) for ref in layers), root,
                lambda i: say(f"flattening layer {i + 1}/{len(layers)} ({_mb(layers[i].blob_size)})"),
                max_bytes=export_budget(sum(ref.blob_size for ref in layers)),
            )
            say("squashing the root file system (mksquashfs)")
            sif = write_image_sif(root, dest, config, deffile_for(name), runner,
                                  image_id=image_id(image), processors=processors)
        finally:
            rmtree(root)  # whatever the image held (modes, depth): iterative, no symlink followed
    return sif, stats


def image_id(image: ImageArchive) -> str:
    return "sha256:" + hashlib.sha256(image.meta.config_raw).hexdigest()


def _mb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def required_tools(fmt: ExportFormat) -> dict[str, str]:
    """The programs a format needs besides the engine, each with how to install it."""
    return {"mksquashfs": MKSQUASHFS_HINT} if fmt == "sif" else {}


def check_tools(fmt: ExportFormat) -> None:
    """Refuse at once when a tool the format needs is missing (before any slow step)."""
    for tool, hint in required_tools(fmt).items():
        if shutil.which(tool) is None:
            raise ToolMissingError(
                f"kiln export --format {fmt} needs `{tool}`, which is not installed (not found on PATH);"
                " nothing was saved or written.",
                hint=hint,
            )


#: what an export writes beside its destination, in image sizes (the engine's uncompressed size): the saved
#: docker-archive; for oci-archive the archive and its copy; for sif the archive, the root file system (sparse
#: files stay sparse) and the squashfs (about half)
ROOM_FACTORS: dict[ExportFormat, float] = {"docker-archive": 1.0, "oci-archive": 2.0, "sif": 2.5}


def check_room(engine: Any, image: str, fmt: ExportFormat, folder: Path) -> None:
    """Refuse an export that cannot fit on the disk of ``folder`` before anything is saved (exit 10): the
    image's size (as the engine reports it) times what the format writes, against the free space."""
    inspect = getattr(engine, "inspect_image", None)
    if inspect is None:
        return
    try:
        size = int(inspect(image).size)
    except Exception:  # noqa: BLE001 - no size known: the save says what is wrong with the image
        return
    need = int(size * ROOM_FACTORS[fmt])
    free = free_bytes(folder)
    if need > free:
        raise FilesError(
            f"exporting {image} ({size / 1e9:.2f} GB in {getattr(engine, 'name', 'the engine')}) as {fmt} writes about "
            f"{need / 1e9:.1f} GB beside {folder}, and its disk has {free / 1e9:.1f} GB free; nothing was written.",
            hint="Free space there, or write the export to a disk with more room (-o elsewhere).",
        )


def export_image(
    image: str,
    fmt: ExportFormat,
    dest: Path,
    *,
    engine: Saver,
    runner: Runner,
    processors: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Export ``image`` from the engine as ``fmt`` into ``dest`` (written atomically)."""
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}.", hint=f"Use one of: {', '.join(FORMATS)}.")
    check_tools(fmt)
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    dest = dest.resolve()
    if dest.is_dir():
        raise InputError(f"{dest} is a folder.", hint="Give the output file's path with -o.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    check_room(engine, image, fmt, dest.parent)
    sif_info: dict[str, Any] | None = None
    stats: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix=".kiln-export-", dir=dest.parent) as tmp:
        # saved beside dest (same disk) and moved into place when whole: an interrupted save leaves no part of dest
        saved = Path(tmp) / "image.docker.tar"
        say(f"saving {image} as a docker-archive ({engine.name} save)")
        engine.save(image, saved)
        with open_image(saved, tag=image) as archive:
            layers = len(archive.meta.layers)
            if fmt == "oci-archive":
                ref = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else "latest"
                write_oci_archive(archive, dest, ref,
                                  lambda i: say(f"converting layer {i + 1}/{layers} into an OCI archive"))
            elif fmt == "sif":
                sif, flat = export_archive_to_sif(archive, dest, image, runner, processors=processors,
                                                  work_dir=Path(tmp), progress=say)
                part = sif.primary_partition()
                sif_info = {"id": str(sif.header.id), "arch": sif.header.arch,
                            "objects": [{"id": d.id, "type": d.type_name, "name": d.name, "size": d.size}
                                        for d in sif.descriptors],
                            "partition_bytes": part.size if part else 0}
                stats = flat.to_dict()
        if fmt == "docker-archive":
            os.replace(saved, dest)
    return ExportResult(
        image=image, format=fmt, path=dest, size=dest.stat().st_size, seconds=time.monotonic() - start,
        layers=layers, apptainer_command=apptainer_build_command(dest, fmt, image), sif=sif_info, stats=stats,
    )
