"""``kiln export``: a built image as a docker-archive, an OCI archive, or a ready ``.sif``.

Sites that build with Docker and run with Apptainer need the image as a file:

* ``docker-archive`` — what the engine's ``save`` writes (``docker save`` / ``podman save``);
* ``oci-archive``    — an OCI image layout in a tar (``oci-layout``, ``index.json``, ``blobs/sha256/…``),
  converted from the docker-archive by streaming each blob once (its digest checked on the way);
  ``apptainer build X.sif oci-archive:FILE`` reads it;
* ``sif``            — a SIF file written by ``torchkiln.sif`` without apptainer: the layers are
  flattened in order into a root file system (whiteouts applied), apptainer's ``/.singularity.d``
  layout is added, ``mksquashfs`` squashes it and the SIF objects are written around it.

Flattening is our own code because no maintained Python library applies OCI/Docker layer diffs
(whiteouts ``.wh.NAME`` delete a lower entry, ``.wh..wh..opq`` empties a lower directory) into a
directory. Each layer is read once as a stream; every path is resolved inside the new root (symlinks
are followed as if the root were ``/``, ``..`` stops at the root), so no layer can write outside it.
Ownership is kept when running as root (otherwise the squashfs is made ``-all-root``, as apptainer
does); device nodes are made only as root; extended attributes are not carried over.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import shlex
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from torchkiln.errors import InputError
from torchkiln.runner import Runner
from torchkiln.sif import ImageConfig, SifImage, write_image_sif

ExportFormat = Literal["docker-archive", "oci-archive", "sif"]
FORMATS: tuple[ExportFormat, ...] = ("docker-archive", "oci-archive", "sif")

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_MAX_LINKS = 40
_CHUNK = 1 << 20


class Saver(Protocol):
    """What export needs from an engine (``torchkiln.engines.Engine`` has it): a docker-archive writer."""

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


# -- reading a docker-archive --------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerArchive:
    """The manifest entry of one image in a docker-archive (``docker save``; Docker 25+ too)."""

    path: Path
    config_name: str
    layer_names: tuple[str, ...]
    repo_tags: tuple[str, ...]
    config_bytes: bytes

    @property
    def config(self) -> dict[str, Any]:
        data = json.loads(self.config_bytes)
        if not isinstance(data, dict):
            raise InputError(f"{self.path}: the image config is not a JSON object.")
        return data


def _read_member(tf: tarfile.TarFile, name: str, path: Path) -> bytes:
    try:
        f = tf.extractfile(name)
    except KeyError:
        f = None
    if f is None:
        raise InputError(f"{path} has no {name} (not a docker-archive, or truncated).",
                         hint="Write it with `docker save -o FILE IMAGE` (or kiln export --format docker-archive).")
    return f.read()


def read_docker_archive(path: Path, image: str | None = None) -> DockerArchive:
    try:
        with tarfile.open(path) as tf:
            manifest = json.loads(_read_member(tf, "manifest.json", path))
            if not isinstance(manifest, list) or not manifest:
                raise InputError(f"{path}: manifest.json lists no image.")
            entry = manifest[0]
            if image is not None:
                entry = next((m for m in manifest if image in (m.get("RepoTags") or [])), entry)
            config_name = str(entry["Config"])
            layers = tuple(str(x) for x in entry["Layers"])
            config = _read_member(tf, config_name, path)
    except (tarfile.TarError, OSError, KeyError, ValueError) as e:
        raise InputError(f"{path} is not a readable docker-archive ({e}).",
                         hint="Write it with `docker save -o FILE IMAGE`.") from None
    return DockerArchive(path, config_name, layers, tuple(entry.get("RepoTags") or ()), config)


@contextmanager
def _layers(archive: DockerArchive) -> Iterator[Iterator[tuple[str, IO[bytes]]]]:
    """Each layer of the archive, in order from the base, as a readable stream."""
    with tarfile.open(archive.path) as tf:

        def gen() -> Iterator[tuple[str, IO[bytes]]]:
            for name in archive.layer_names:
                f = tf.extractfile(name)
                if f is None:
                    raise InputError(f"{archive.path}: layer {name} is missing (truncated archive).")
                yield name, f

        yield gen()


# -- flattening ----------------------------------------------------------------------------------------


@dataclass
class FlattenStats:
    layers: int = 0
    files: int = 0
    bytes: int = 0
    whiteouts: int = 0
    skipped_devices: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        _make_writable(p)
        shutil.rmtree(p)
    elif p.is_symlink() or p.exists():
        p.unlink()


def _make_writable(top: Path) -> None:
    for d, dirs, _ in os.walk(top):
        for x in dirs:
            q = Path(d) / x
            if not q.is_symlink():
                q.chmod(q.stat().st_mode | stat.S_IRWXU)
    top.chmod(top.stat().st_mode | stat.S_IRWXU)


class Flattener:
    """Applies layer tars, in order, to a root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.is_root = os.geteuid() == 0
        self.stats = FlattenStats()
        self._dirs: dict[str, tarfile.TarInfo] = {}
        self._layer: set[str] = set()

    # path resolution inside the root
    def resolve(self, rel: str, *, create: bool) -> Path | None:
        """The real directory ``rel`` names inside the root (symlinks followed within it), or None."""
        stack = [p for p in reversed(rel.split("/")) if p not in ("", ".")]
        cur = self.root
        links = 0
        while stack:
            part = stack.pop()
            if part == "..":
                cur = cur.parent if cur != self.root else self.root
                continue
            nxt = cur / part
            if nxt.is_symlink():
                links += 1
                if links > _MAX_LINKS:
                    raise InputError(f"too many levels of symbolic links under /{rel} in the image.")
                target = os.readlink(nxt)
                if target.startswith("/"):
                    cur = self.root
                stack.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
                continue
            if not nxt.exists():
                if not create:
                    return None
                nxt.mkdir(mode=0o755)
            elif not nxt.is_dir():
                if not create:
                    return None
                nxt.unlink()  # a layer puts a directory where a lower layer had a file
                nxt.mkdir(mode=0o755)
            cur = nxt
        return cur

    def apply(self, stream: IO[bytes]) -> None:
        self.stats.layers += 1
        self._layer = set()
        try:
            with tarfile.open(fileobj=stream, mode="r|*") as tf:
                for m in tf:
                    self._entry(tf, m)
        except tarfile.TarError as e:
            raise InputError(f"layer {self.stats.layers} of the image is not a readable tar ({e}).",
                             hint="Save the image again; the archive may be truncated.") from None

    def _entry(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        name = posixpath.normpath(m.name.lstrip("/")).lstrip("/")
        if name in ("", ".") or name.startswith("../") or name == "..":
            return
        parent_rel, base = posixpath.split(name)
        if base == OPAQUE:
            d = self.resolve(parent_rel, create=False)
            if d is not None:
                for child in list(d.iterdir()):
                    if str(child) not in self._layer:
                        _remove(child)
            self.stats.whiteouts += 1
            return
        if base.startswith(WHITEOUT):
            d = self.resolve(parent_rel, create=False)
            if d is not None:
                _remove(d / base[len(WHITEOUT):])
            self.stats.whiteouts += 1
            return
        parent = self.resolve(parent_rel, create=True)
        assert parent is not None
        dest = parent / base
        if dest.is_symlink() or dest.exists():
            if not (m.isdir() and dest.is_dir() and not dest.is_symlink()):
                _remove(dest)
        self._layer.add(str(dest))
        if m.isdir():
            if not dest.exists():
                dest.mkdir(mode=0o755)
            self._dirs[str(dest)] = m
            return
        if m.isfile():
            src = tf.extractfile(m)
            assert src is not None
            with dest.open("wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
            self.stats.files += 1
            self.stats.bytes += m.size
        elif m.issym():
            os.symlink(m.linkname, dest)
        elif m.islnk():
            lname = posixpath.normpath(m.linkname.lstrip("/"))
            lparent, lbase = posixpath.split(lname)
            d = self.resolve(lparent, create=False)
            target = d / lbase if d is not None else None
            if target is None or not (target.exists() or target.is_symlink()):
                raise InputError(f"the image's hard link /{name} points at /{lname}, which no layer holds.")
            os.link(target, dest, follow_symlinks=False)
            return  # shares the target's inode and metadata
        elif m.ischr() or m.isblk() or m.isfifo():
            if not self.is_root and not m.isfifo():
                self.stats.skipped_devices += 1
                return
            kind = stat.S_IFCHR if m.ischr() else stat.S_IFBLK if m.isblk() else stat.S_IFIFO
            os.mknod(dest, kind | (m.mode & 0o7777), os.makedev(m.devmajor, m.devminor))
        else:
            return
        self._meta(dest, m)

    def _meta(self, p: Path, m: tarfile.TarInfo) -> None:
        if self.is_root:
            os.lchown(p, m.uid, m.gid)
        if not m.issym():
            p.chmod(m.mode & 0o7777)
        os.utime(p, (m.mtime, m.mtime), follow_symlinks=False)

    def finish(self) -> FlattenStats:
        """Directory modes and times last (children were written into them meanwhile)."""
        for path in sorted(self._dirs, key=lambda s: s.count("/"), reverse=True):
            p = Path(path)
            if p.is_dir() and not p.is_symlink():
                self._meta(p, self._dirs[path])
        self._dirs.clear()
        return self.stats


def flatten(archive: DockerArchive, root: Path) -> FlattenStats:
    """Apply every layer of ``archive`` to ``root`` (an empty directory)."""
    f = Flattener(root)
    with _layers(archive) as layers:
        for _name, stream in layers:
            f.apply(stream)
    return f.finish()


# -- OCI archive -----------------------------------------------------------------------------------------


class _Hashing:
    """A reader that hashes what passes through it (tarfile.addfile only calls ``read``)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        self.h.update(b)
        return b


def _tarinfo(name: str, size: int, *, directory: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = 0 if directory else size
    ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    ti.mode = 0o755 if directory else 0o644
    ti.mtime = 0
    return ti


def _blob_digest(name: str, diff_id: str | None) -> str:
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "blobs" and len(parts[2]) == 64:
        return f"{parts[1]}:{parts[2]}"
    if diff_id:
        return diff_id
    raise InputError(f"layer {name} has no digest in the image config (rootfs.diff_ids).")


def write_oci_archive(archive: DockerArchive, dest: Path, ref_name: str) -> int:
    """Convert a docker-archive into an OCI image layout tar (deterministic); returns the layer count."""
    config = archive.config
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    cfg_digest = "sha256:" + hashlib.sha256(archive.config_bytes).hexdigest()
    layers: list[dict[str, Any]] = []
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out, tarfile.open(archive.path) as src:
            out.addfile(_tarinfo("blobs", 0, directory=True))
            out.addfile(_tarinfo("blobs/sha256", 0, directory=True))
            out.addfile(_tarinfo(f"blobs/sha256/{cfg_digest[7:]}", len(archive.config_bytes)),
                        io.BytesIO(archive.config_bytes))
            for i, name in enumerate(archive.layer_names):
                member = src.getmember(name)
                while member.issym() or member.islnk():  # Docker 25+ links duplicate layer paths to blobs
                    member = src.getmember(posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                             member.linkname))
                                           if member.issym() else member.linkname)
                digest = _blob_digest(member.name, diff_ids[i] if i < len(diff_ids) else None)
                f = src.extractfile(member)
                assert f is not None
                head = f.read(4)
                f.seek(0)
                hashing = _Hashing(f)
                out.addfile(_tarinfo(f"blobs/sha256/{digest.split(':', 1)[1]}", member.size),
                            hashing)
                got = "sha256:" + hashing.h.hexdigest()
                if got != digest:
                    raise InputError(f"layer {name} of {archive.path} has digest {got}, expected {digest} "
                                     "(a compressed or corrupt layer).",
                                     hint="Save the image again with `docker save`.")
                media = OCI_LAYER + ("+gzip" if head[:2] == b"\x1f\x8b" else "+zstd" if head == b"\x28\xb5\x2f\xfd"
                                     else "")
                layers.append({"mediaType": media, "digest": digest, "size": member.size})
            manifest = json.dumps({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(archive.config_bytes)},
                "layers": layers,
            }, separators=(",", ":")).encode()
            m_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            out.addfile(_tarinfo(f"blobs/sha256/{m_digest[7:]}", len(manifest)), io.BytesIO(manifest))
            index = json.dumps({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"mediaType": OCI_MANIFEST, "digest": m_digest, "size": len(manifest),
                               "annotations": {"org.opencontainers.image.ref.name": ref_name}}],
            }, separators=(",", ":")).encode()
            layout = b'{"imageLayoutVersion":"1.0.0"}'
            out.addfile(_tarinfo("oci-layout", len(layout)), io.BytesIO(layout))
            out.addfile(_tarinfo("index.json", len(index)), io.BytesIO(index))
        tmp.chmod(0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(layers)


# -- the whole export -------------------------------------------------------------------------------------


def deffile_for(image: str) -> str:
    """The definition a SIF converted from a local Docker image carries (what rebuilds it with apptainer)."""
    return f"Bootstrap: docker-daemon\nFrom: {image}\n"


def export_archive_to_sif(
    archive: DockerArchive, dest: Path, image: str, runner: Runner, *, processors: int | None = None,
    work_dir: Path | None = None,
) -> tuple[SifImage, FlattenStats]:
    """Flatten a docker-archive into a temporary root next to ``dest`` and write the SIF."""
    config = ImageConfig.from_json(archive.config)
    with tempfile.TemporaryDirectory(prefix=".kiln-rootfs-", dir=work_dir or dest.parent) as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        try:
            stats = flatten(archive, root)
            sif = write_image_sif(root, dest, config, deffile_for(image), runner,
                                  image_id=_image_id(archive), processors=processors)
        finally:
            _make_writable(root)  # so that the temporary folder can be removed as a non-root user
    return sif, stats


def _image_id(archive: DockerArchive) -> str:
    return "sha256:" + hashlib.sha256(archive.config_bytes).hexdigest()


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
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir():
        raise InputError(f"{dest} is a folder.", hint="Give the output file's path with -o.")
    sif_info: dict[str, Any] | None = None
    stats: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix=".kiln-export-", dir=dest.parent) as tmp:
        saved = dest if fmt == "docker-archive" else Path(tmp) / "image.docker.tar"
        say(f"saving {image} as a docker-archive")
        engine.save(image, saved)
        archive = read_docker_archive(saved, image)
        layers = len(archive.layer_names)
        if fmt == "oci-archive":
            say(f"converting {layers} layers into an OCI archive")
            write_oci_archive(archive, dest, image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else "latest")
        elif fmt == "sif":
            say(f"flattening {layers} layers and squashing the root file system")
            sif, flat = export_archive_to_sif(archive, dest, image, runner, processors=processors, work_dir=Path(tmp))
            part = sif.primary_partition()
            sif_info = {"id": str(sif.header.id), "arch": sif.header.arch,
                        "objects": [{"id": d.id, "type": d.type_name, "name": d.name, "size": d.size}
                                    for d in sif.descriptors],
                        "partition_bytes": part.size if part else 0}
            stats = flat.to_dict()
    return ExportResult(
        image=image, format=fmt, path=dest, size=dest.stat().st_size, seconds=time.monotonic() - start,
        layers=layers, apptainer_command=apptainer_build_command(dest, fmt, image), sif=sif_info, stats=stats,
    )
