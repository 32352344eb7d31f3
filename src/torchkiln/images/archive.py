"""Read container images from files without running or extracting them.

Formats: a docker-archive tar (``docker save``), an OCI image layout (a directory, or a tar of
one; Docker 25+ ``docker save`` writes both at once), or either unpacked into a directory. The
outer tar is indexed once (its member headers only); every blob is then opened as a
:class:`~torchkiln.images._io.RangeFile` view into it, so nothing is copied to disk.

Layers are read member by member with :mod:`tarfile`. Uncompressed layers (what ``docker save``
writes) are read by random access: a member's content is touched only when asked for (the first
bytes of each regular file, to spot ELF files; all of an ELF file's fat-binary headers; small
package metadata files). Gzip or zstd layers (OCI layouts pushed from registries) are streamed
once; an ELF member of such a layer is copied to a spooled temporary file (memory first) so that
it can be read at random.

The manifests and configs are untrusted input: every JSON value is checked for its type before
use (:mod:`torchkiln.images.meta`), blob names are confined to the archive or layout (a digest
with ``/`` or ``..`` is refused, a directory layout never opens a file outside itself). The
library raises :class:`torchkiln.errors.InputError` for anything missing, truncated or malformed;
it never prints.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from torchkiln.errors import InputError
from torchkiln.images._io import ForwardReader, IOStats, RangeFile, TimedReader, Window
from torchkiln.images.layers import Member, member_of, norm_path
from torchkiln.images.meta import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    Compression,
    ImageMeta,
    LayerRef,
    blob_name,
    compression_of,
    docker_archive_meta,
    oci_manifest_descriptor,
    oci_meta,
    parse_json,
)

__all__ = [
    "GZIP_MAGIC",
    "ZSTD_MAGIC",
    "Compression",
    "ImageArchive",
    "ImageMeta",
    "LayerRef",
    "Member",
    "decompressed",
    "is_tar",
    "iter_layer_stream",
    "open_image",
]

_TAR_HINT = (
    "Give a `docker save` archive, an OCI layout (directory or tar), a .whl, or an ELF file;"
    " a truncated download or copy also ends up here."
)


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
            self._root = source.resolve()
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
                    name = norm_path(ti.name)
                    if ti.isreg():
                        if ti.offset_data + ti.size > size:
                            raise InputError(
                                f"{source} is truncated: member {ti.name} ends at byte {ti.offset_data + ti.size}"
                                f" but the file has {size} bytes.",
                                hint="Save the image again (`docker save -o FILE IMAGE`).",
                            )
                        self._index[name] = (ti.offset_data, ti.size)
                    elif ti.issym() or ti.islnk():
                        # OCI tars from some tools link duplicate blobs; resolve within the archive
                        target = norm_path(ti.linkname if ti.islnk() else f"{name.rpartition('/')[0]}/{ti.linkname}")
                        if target in self._index:
                            self._index[name] = self._index[target]
        except (tarfile.TarError, EOFError, ValueError) as e:
            self.close()
            raise InputError(f"{source} is not a readable tar archive ({e}).", hint=_TAR_HINT) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for fd in self._dir_fds:
            os.close(fd)
        self._dir_fds.clear()

    def _dir_path(self, name: str) -> Path | None:
        """The file ``name`` names inside a directory layout, or None when it would lie outside."""
        p = (self._root / norm_path(name)).resolve()
        if p != self._root and self._root not in p.parents:
            return None
        return p

    def has(self, name: str) -> bool:
        name = norm_path(name)
        if self._index is not None:
            return name in self._index
        p = self._dir_path(name)
        return p is not None and p.is_file()

    def size(self, name: str) -> int:
        return self.open(name).size

    def open(self, name: str) -> RangeFile:
        name = norm_path(name)
        if self._index is not None:
            if name not in self._index:
                raise InputError(
                    f"{self.source} has no {name} although its manifest names it (an incomplete archive).",
                    hint="Save the image again (`docker save -o FILE IMAGE`).",
                )
            off, size = self._index[name]
            return RangeFile(self._fd, off, size, self.stats)
        p = self._dir_path(name)
        if p is None:
            raise InputError(
                f"{self.source}: its manifest names {name}, which lies outside the layout (a symbolic link).",
                hint="Give a layout whose blobs are files inside it (`skopeo copy` or `docker save` writes one).",
            )
        try:
            fd = os.open(p, os.O_RDONLY)
            st = os.fstat(fd)
        except OSError as e:
            raise InputError(
                f"{self.source / name}: {e.strerror} (the layout's manifest names it).",
                hint="The layout is incomplete; copy it again.",
            ) from None
        self._dir_fds.append(fd)  # closed with the store
        return RangeFile(fd, 0, st.st_size, self.stats)

    def read_json(self, name: str, limit: int = 64 << 20) -> Any:
        f = self.open(name)
        if f.size > limit:
            raise InputError(f"{self.source}: {name} is {f.size} bytes, too big for an image's JSON metadata.",
                             hint="The archive is corrupt.")
        return parse_json(f.read(), f"{self.source}: {name}")

    def total_size(self) -> int:
        if self._index is not None:
            return os.fstat(self._fd).st_size
        return sum(p.stat().st_size for p in self.source.rglob("*") if p.is_file() and not p.is_symlink())


class ImageArchive:
    """An opened image. Use as a context manager; layers are read with :meth:`iter_layer`."""

    def __init__(self, path: Path, *, tag: str | None = None, stats: IOStats | None = None) -> None:
        self.stats = stats or IOStats()
        if not path.exists():
            raise InputError(f"{path}: no such file or directory.")
        self._store = _Store(path, self.stats)
        try:
            if self._store.has("manifest.json"):
                manifest = self._store.read_json("manifest.json")
                self.meta = docker_archive_meta(
                    manifest, lambda name: self._store.open(name).read(), self._layer_info, str(path), tag,
                    self._store.total_size(),
                )
            elif self._store.has("index.json"):
                index = self._store.read_json("index.json")
                desc = oci_manifest_descriptor(index, self._store.read_json, str(path), tag)
                self.meta = oci_meta(
                    desc, self._store.read_json, lambda name: self._store.open(name).read(), self._layer_info,
                    str(path), self._store.total_size(),
                )
            else:
                raise InputError(
                    f"{path} is neither a docker-archive (no manifest.json) nor an OCI image layout (no index.json).",
                    hint="Create one with `docker save -o image.tar IMAGE`, or give the image name instead.",
                )
        except BaseException:
            self._store.close()
            raise

    def _layer_info(self, name: str) -> tuple[int, bytes]:
        blob = self._store.open(name)
        return blob.size, blob.pread(0, 4)

    def __enter__(self) -> ImageArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    # -- layers ----------------------------------------------------------------------------------
    def blob(self, layer: LayerRef) -> RangeFile:
        """The layer's bytes as stored (compressed or not)."""
        return self._store.open(layer.path)

    def layer_stream(self, layer: LayerRef) -> IO[bytes]:
        """The layer's tar, decompressed, as a sequential stream."""
        what = f"layer {layer.index} ({layer.path}) of {self.meta.source}"
        return decompressed(cast(IO[bytes], self.blob(layer)), layer.compression, what, self.stats)

    def iter_layer(self, layer: LayerRef) -> Iterator[Member]:
        """The entries of one layer in tar order (whiteouts included, marked)."""
        blob = self.blob(layer)
        what = f"layer {layer.index} ({layer.path}) of {self.meta.source}"
        if layer.compression != "none":
            yield from iter_layer_stream(decompressed(cast(IO[bytes], blob), layer.compression, what, self.stats), what)
            return
        try:
            with tarfile.open(fileobj=blob, mode="r:") as tar:
                for ti in tar:
                    m = member_of(ti)
                    if m.type == "file":
                        if ti.offset_data + ti.size > blob.size:
                            raise InputError(f"{what} is truncated inside {ti.name}.",
                                             hint="Save the image again (`docker save -o FILE IMAGE`).")
                        m._view = blob.sub(ti.offset_data, ti.size)
                    if m.path:
                        yield m
        except (tarfile.TarError, EOFError, ValueError, OverflowError) as e:
            raise InputError(f"{what} is not a readable tar ({e}).",
                             hint="The archive is corrupt or truncated.") from None


def decompressed(blob: IO[bytes], compression: Compression, what: str, stats: IOStats | None) -> IO[bytes]:
    """A sequential reader of a layer's tar bytes, decompressing gzip or zstd."""
    if compression == "none":
        return blob
    if compression == "gzip":
        return TimedReader(gzip.GzipFile(fileobj=blob, mode="rb"), stats)  # type: ignore[return-value]
    try:
        import zstandard
    except ImportError:
        raise InputError(
            f"{what} is zstd-compressed and the zstandard module is not installed.",
            hint="pip install zstandard",
        ) from None
    reader = zstandard.ZstdDecompressor().stream_reader(blob, read_across_frames=True)
    return TimedReader(reader, stats)  # type: ignore[return-value]


def iter_layer_stream(stream: IO[bytes], what: str, stats: IOStats | None = None) -> Iterator[Member]:
    """The entries of a layer tar read once, in order, from a sequential stream (a pipe, a decompressor).

    The stream is walked by :class:`tarfile.TarFile` in its random-access mode over a
    :class:`~torchkiln.images._io.ForwardReader` (it only ever seeks forward on one pass), which
    copies only what is read and skips the rest without copying it.
    """
    reader = stream if isinstance(stream, (ForwardReader, Window)) else ForwardReader(stream)
    try:
        with tarfile.open(fileobj=reader, mode="r:") as tar:
            for ti in tar:
                m = member_of(ti)
                if m.type == "file":  # content read from the reader itself, only if asked for
                    m._fwd, m._at, m._stats = reader, ti.offset_data, stats
                if m.path:
                    yield m
    except (tarfile.TarError, ValueError, OverflowError) as e:
        raise InputError(f"{what} is not a readable tar ({e}).", hint="The archive is corrupt or truncated.") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"{what} is corrupt or truncated ({e}).", hint="Save or download the image again.") from None
    except Exception as e:
        if type(e).__name__ == "ZstdError":
            raise InputError(f"{what} is corrupt ({e}).", hint="Save or download the image again.") from None
        raise


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


__all__ += ["blob_name", "compression_of"]
