"""Read container images without running or extracting them.

Formats: a docker-archive tar (``docker save``), an OCI image layout (a directory, or a tar of
one; Docker 25+ ``docker save`` writes both at once), or either unpacked into a directory. The
outer tar is indexed once (its member headers only); every blob is then opened as a
:class:`~torchkiln.inspect._io.RangeFile` view into it, so nothing is copied to disk.

Layers are read member by member with :mod:`tarfile`. Uncompressed layers (what ``docker save``
writes) are read by random access: a member's content is touched only when asked for (the first
bytes of each regular file, to spot ELF files; all of an ELF file's fat-binary headers; small
package metadata files). Gzip or zstd layers (OCI layouts pushed from registries) are streamed
once; an ELF member of such a layer is copied to a spooled temporary file (memory first) so that
it can be read at random.

The library raises :class:`torchkiln.errors.InputError` for anything missing, truncated or
malformed; it never prints.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import posixpath
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from torchkiln.errors import InputError
from torchkiln.inspect._io import IOStats, RangeFile, TimedReader
from torchkiln.inspect.fatbin import BinaryFile

Compression = Literal["none", "gzip", "zstd"]
MemberType = Literal["file", "dir", "symlink", "hardlink", "other"]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: ELF members bigger than this spill from memory to a temporary file when a layer is streamed
SPOOL_MEMORY = 256 << 20
WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"

_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@dataclass(frozen=True)
class LayerRef:
    """One layer of an image, in order from the base."""

    index: int
    #: uncompressed digest (``rootfs.diff_ids``) when the config has it, else the blob digest
    digest: str
    #: where the layer lies in the archive or layout
    path: str
    #: bytes stored in the archive (compressed size for compressed layers)
    blob_size: int
    compression: Compression
    media_type: str | None = None
    #: the instruction that made the layer (the config's history), when known
    created_by: str | None = None


@dataclass(frozen=True)
class ImageMeta:
    format: Literal["docker-archive", "oci-layout"]
    source: str
    tags: tuple[str, ...]
    os: str | None
    architecture: str | None
    config: dict[str, Any]
    layers: tuple[LayerRef, ...]
    #: bytes of the archive (or the layout's blobs) on disk
    archive_size: int


@dataclass
class Member:
    """One entry of a layer tar. Content readers are valid only until the next member is read."""

    path: str
    type: MemberType
    size: int
    mode: int
    linkname: str = ""
    #: for whiteout entries: "file" (deletes ``path``) or "opaque" (hides the lower contents of ``path``)
    whiteout: Literal["file", "opaque"] | None = None
    _view: RangeFile | None = field(default=None, repr=False)
    _stream: IO[bytes] | None = field(default=None, repr=False)
    _head: bytes = field(default=b"", repr=False)
    _stats: IOStats | None = field(default=None, repr=False)

    def read_head(self, n: int) -> bytes:
        """The first ``n`` bytes of a regular file (fewer if it is shorter)."""
        if self._view is not None:
            return self._view.pread(0, n)
        if self._stream is None:
            return b""
        if len(self._head) < n:
            self._head += self._stream.read(n - len(self._head))
        return self._head[:n]

    def read_all(self, limit: int = 64 << 20) -> bytes:
        """The whole content of a (small) regular file."""
        if self.size > limit:
            raise InputError(f"{self.path} is {self.size} bytes, more than the {limit} expected.")
        if self._view is not None:
            return self._view.pread(0, self.size)
        if self._stream is None:
            return b""
        rest = self._stream.read()
        data = self._head + rest
        self._head = data
        return data

    def open_random(self) -> BinaryFile:
        """A seekable file object over the content: a view, or a spooled copy for streamed layers."""
        if self._view is not None:
            return self._view
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115 - caller closes
        spool.write(self._head)
        if self._stream is not None:
            while True:
                chunk = self._stream.read(8 << 20)
                if not chunk:
                    break
                spool.write(chunk)
        spool.seek(0)
        return spool


def _norm_member(name: str) -> str:
    p = posixpath.normpath("/" + name).lstrip("/")
    return "" if p == "." else p


def _member(ti: tarfile.TarInfo) -> Member:
    path = _norm_member(ti.name)
    mtype: MemberType
    if ti.isreg():
        mtype = "file"
    elif ti.isdir():
        mtype = "dir"
    elif ti.issym():
        mtype = "symlink"
    elif ti.islnk():
        mtype = "hardlink"
    else:
        mtype = "other"
    m = Member(path=path, type=mtype, size=ti.size if mtype == "file" else 0, mode=ti.mode)
    if mtype == "hardlink":
        m.linkname = _norm_member(ti.linkname)
    elif mtype == "symlink":
        m.linkname = ti.linkname
    base = posixpath.basename(path)
    if base == OPAQUE_WHITEOUT:
        m.whiteout = "opaque"
        m.path = posixpath.dirname(path)
    elif base.startswith(WHITEOUT_PREFIX):
        m.whiteout = "file"
        m.path = posixpath.join(posixpath.dirname(path), base[len(WHITEOUT_PREFIX) :])
    return m


class _Store:
    """Named blobs (files of an archive or a directory) opened as random-access views."""

    def __init__(self, source: Path, stats: IOStats) -> None:
        self.source = source
        self.stats = stats
        self._fd = -1
        #: descriptors of the blobs opened from a directory layout
        self._dir_fds: list[int] = []
        #: name -> (offset, size) in the outer tar; None for a directory store
        self._index: dict[str, tuple[int, int]] | None = None
        if source.is_dir():
            return
        try:
            self._fd = os.open(source, os.O_RDONLY)
        except OSError as e:
            raise InputError(f"cannot open {source}: {e.strerror}.") from e
        size = os.fstat(self._fd).st_size
        self._index = {}
        try:
            with tarfile.open(fileobj=RangeFile(self._fd, 0, size, stats), mode="r:") as tar:
                for ti in tar:
                    if ti.isreg():
                        if ti.offset_data + ti.size > size:
                            raise InputError(
                                f"{source} is truncated: member {ti.name} ends at byte {ti.offset_data + ti.size}"
                                f" but the file has {size} bytes.",
                                hint="Save the image again (`docker save -o FILE IMAGE`).",
                            )
                        self._index[_norm_member(ti.name)] = (ti.offset_data, ti.size)
                    elif ti.issym() or ti.islnk():
                        # OCI tars from some tools link duplicate blobs; resolve within the archive
                        target = _norm_member(
                            ti.linkname if ti.islnk() else posixpath.join(posixpath.dirname(ti.name), ti.linkname)
                        )
                        if target in self._index:
                            self._index[_norm_member(ti.name)] = self._index[target]
        except tarfile.TarError as e:
            self.close()
            raise InputError(
                f"{source} is not a readable tar archive ({e}).",
                hint="Give a `docker save` archive, an OCI layout (directory or tar), a .whl, or an ELF file;"
                " a truncated download or copy also ends up here.",
            ) from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for fd in self._dir_fds:
            os.close(fd)
        self._dir_fds.clear()

    def has(self, name: str) -> bool:
        name = _norm_member(name)
        if self._index is not None:
            return name in self._index
        return (self.source / name).is_file()

    def size(self, name: str) -> int:
        name = _norm_member(name)
        if self._index is not None:
            return self._index[name][1]
        return (self.source / name).stat().st_size

    def open(self, name: str) -> RangeFile:
        name = _norm_member(name)
        if self._index is not None:
            if name not in self._index:
                raise InputError(f"{self.source} has no {name} although its manifest names it (incomplete archive).")
            off, size = self._index[name]
            return RangeFile(self._fd, off, size, self.stats)
        p = self.source / name
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError as e:
            raise InputError(f"{p}: {e.strerror} (the layout's manifest names it).") from e
        self._dir_fds.append(fd)  # closed with the store
        return RangeFile(fd, 0, os.fstat(fd).st_size, self.stats)

    def read_json(self, name: str) -> Any:
        try:
            data = self.open(name).read()
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{self.source}: {name} is not valid JSON ({e}).") from e

    def total_size(self) -> int:
        if self._index is not None:
            return os.fstat(self._fd).st_size
        return sum(p.stat().st_size for p in self.source.rglob("*") if p.is_file())


def _ref_names(desc: dict[str, Any]) -> tuple[str | None, str | None]:
    ann = desc.get("annotations") or {}
    return ann.get("org.opencontainers.image.ref.name"), ann.get("io.containerd.image.name")


def _compression_of(head: bytes, media_type: str | None) -> Compression:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if media_type and (media_type.endswith("+gzip") or media_type.endswith(".gzip")):
        return "gzip"
    if media_type and media_type.endswith("+zstd"):
        return "zstd"
    return "none"


def _history_for_layers(config: dict[str, Any], count: int) -> list[str | None]:
    hist = [h for h in config.get("history") or [] if isinstance(h, dict) and not h.get("empty_layer")]
    out: list[str | None] = []
    for h in hist[:count]:
        text = str(h.get("created_by") or h.get("comment") or "").strip()
        if text.startswith("/bin/sh -c #(nop) "):  # the classic builder's non-RUN instructions
            text = text[len("/bin/sh -c #(nop) ") :].strip()
        elif text.startswith("/bin/sh -c "):
            text = "RUN " + text[len("/bin/sh -c ") :]
        if text.endswith(" # buildkit"):
            text = text[: -len(" # buildkit")]
        out.append(text or None)
    out += [None] * (count - len(out))
    return out


class ImageArchive:
    """An opened image. Use as a context manager; layers are read with :meth:`iter_layer`."""

    def __init__(self, path: Path, *, tag: str | None = None, stats: IOStats | None = None) -> None:
        self.stats = stats or IOStats()
        if not path.exists():
            raise InputError(f"{path}: no such file or directory.")
        self._store = _Store(path, self.stats)
        try:
            if self._store.has("manifest.json"):
                self.meta = self._docker_archive(path, tag)
            elif self._store.has("index.json"):
                self.meta = self._oci_layout(path, tag)
            else:
                raise InputError(
                    f"{path} is neither a docker-archive (no manifest.json) nor an OCI image layout (no index.json).",
                    hint="Create one with `docker save -o image.tar IMAGE`, or give the image name instead.",
                )
        except BaseException:
            self._store.close()
            raise

    def __enter__(self) -> ImageArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    # -- formats ---------------------------------------------------------------------------------
    def _docker_archive(self, path: Path, tag: str | None) -> ImageMeta:
        manifest = self._store.read_json("manifest.json")
        if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
            raise InputError(f"{path}: manifest.json does not describe any image.")
        entry = manifest[0]
        if tag is not None:
            for m in manifest:
                if tag in (m.get("RepoTags") or []):
                    entry = m
                    break
        config_name = entry.get("Config")
        layer_names = entry.get("Layers")
        if not isinstance(config_name, str) or not isinstance(layer_names, list):
            raise InputError(f"{path}: manifest.json lacks Config or Layers.")
        config = self._store.read_json(config_name)
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        history = _history_for_layers(config, len(layer_names))
        layers = []
        for i, name in enumerate(layer_names):
            head = self._store.open(name).pread(0, 4)
            digest = diff_ids[i] if i < len(diff_ids) else posixpath.dirname(name) or name
            layers.append(
                LayerRef(
                    index=i,
                    digest=str(digest),
                    path=name,
                    blob_size=self._store.size(name),
                    compression=_compression_of(head, None),
                    created_by=history[i],
                )
            )
        return ImageMeta(
            format="docker-archive",
            source=str(path),
            tags=tuple(entry.get("RepoTags") or ()),
            os=config.get("os"),
            architecture=config.get("architecture"),
            config=config,
            layers=tuple(layers),
            archive_size=self._store.total_size(),
        )

    def _blob_name(self, digest: str) -> str:
        alg, _, hexd = str(digest).partition(":")
        if not hexd or "/" in hexd or "/" in alg:
            raise InputError(f"malformed blob digest {digest!r} in the OCI layout.")
        return f"blobs/{alg}/{hexd}"

    def _pick_manifest(self, index: dict[str, Any], path: Path, tag: str | None, depth: int = 0) -> dict[str, Any]:
        manifests = [m for m in index.get("manifests") or [] if isinstance(m, dict)]
        if not manifests or depth > 4:
            raise InputError(f"{path}: the OCI index lists no image manifest.")
        if tag is not None:
            named = [m for m in manifests if tag in _ref_names(m)]
            manifests = named or manifests
        machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

        def rank(m: dict[str, Any]) -> int:
            plat = m.get("platform") or {}
            ann = m.get("annotations") or {}
            if ann.get("vnd.docker.reference.type") == "attestation-manifest" or plat.get("os") == "unknown":
                return 2
            return 0 if plat.get("architecture") in (None, machine) else 1

        chosen = sorted(manifests, key=rank)[0]
        if chosen.get("mediaType") in _INDEX_TYPES:
            return self._pick_manifest(self._store.read_json(self._blob_name(chosen["digest"])), path, None, depth + 1)
        return chosen

    def _oci_layout(self, path: Path, tag: str | None) -> ImageMeta:
        index = self._store.read_json("index.json")
        desc = self._pick_manifest(index, path, tag)
        manifest = self._store.read_json(self._blob_name(desc.get("digest", "")))
        if manifest.get("mediaType") in _INDEX_TYPES or "manifests" in manifest:
            desc = self._pick_manifest(manifest, path, None, 1)
            manifest = self._store.read_json(self._blob_name(desc.get("digest", "")))
        cfg_desc = manifest.get("config") or {}
        config = self._store.read_json(self._blob_name(cfg_desc.get("digest", "")))
        layer_descs = [d for d in manifest.get("layers") or [] if isinstance(d, dict)]
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        history = _history_for_layers(config, len(layer_descs))
        layers = []
        for i, d in enumerate(layer_descs):
            name = self._blob_name(d.get("digest", ""))
            head = self._store.open(name).pread(0, 4)
            layers.append(
                LayerRef(
                    index=i,
                    digest=str(diff_ids[i] if i < len(diff_ids) else d.get("digest")),
                    path=name,
                    blob_size=self._store.size(name),
                    compression=_compression_of(head, d.get("mediaType")),
                    media_type=d.get("mediaType"),
                    created_by=history[i],
                )
            )
        ann = desc.get("annotations") or {}
        names = (ann.get("io.containerd.image.name"), ann.get("org.opencontainers.image.ref.name"))
        tags = tuple(t for t in names if t)
        return ImageMeta(
            format="oci-layout",
            source=str(path),
            tags=tags,
            os=config.get("os"),
            architecture=config.get("architecture"),
            config=config,
            layers=tuple(layers),
            archive_size=self._store.total_size(),
        )

    # -- layers ----------------------------------------------------------------------------------
    def iter_layer(self, layer: LayerRef) -> Iterator[Member]:
        """The entries of one layer in tar order (whiteouts included, marked)."""
        blob = self._store.open(layer.path)
        what = f"layer {layer.index} ({layer.path}) of {self.meta.source}"
        try:
            if layer.compression == "none":
                with tarfile.open(fileobj=blob, mode="r:") as tar:
                    for ti in tar:
                        m = _member(ti)
                        if m.type == "file":
                            if ti.offset_data + ti.size > blob.size:
                                raise InputError(f"{what} is truncated inside {ti.name}.")
                            m._view = blob.sub(ti.offset_data, ti.size)
                        if m.path:
                            yield m
                return
            stream = self._decompressor(blob, layer, what)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for ti in tar:
                    m = _member(ti)
                    if m.type == "file":
                        m._stream = tar.extractfile(ti)
                    if m.path:
                        yield m
        except tarfile.TarError as e:
            raise InputError(f"{what} is not a readable tar ({e}).", hint="The archive is corrupt or truncated.") from e
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise InputError(f"{what} is corrupt or truncated ({e}).") from e

    def _decompressor(self, blob: RangeFile, layer: LayerRef, what: str) -> TimedReader:
        if layer.compression == "gzip":
            return TimedReader(gzip.GzipFile(fileobj=blob, mode="rb"), self.stats)
        try:
            import zstandard
        except ImportError as e:
            raise InputError(
                f"{what} is zstd-compressed and the zstandard module is not installed.",
                hint="pip install zstandard",
            ) from e
        reader = zstandard.ZstdDecompressor().stream_reader(blob, read_across_frames=True)  # type: ignore[arg-type]
        return TimedReader(reader, self.stats)


def open_image(path: Path, *, tag: str | None = None, stats: IOStats | None = None) -> ImageArchive:
    """Open a docker-archive or OCI layout (tar or directory); raises InputError if it is neither."""
    return ImageArchive(path, tag=tag, stats=stats)


def is_tar(head: bytes) -> bool:
    """Whether ``head`` (at least 512 bytes) starts a tar archive (ustar, GNU or a valid v7 header)."""
    if len(head) < 512:
        return False
    if head[257:262] == b"ustar":
        return True
    try:
        chksum = int(head[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    calc = sum(head[:148]) + 8 * 32 + sum(head[156:512])
    return chksum == calc
