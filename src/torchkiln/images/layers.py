"""One entry of an image layer, and the layer-diff rules (whiteouts, path normalisation), once.

Every reader of layers (a layer tar at random access, a streamed layer tar, a layer folder of the
engine's own storage) yields :class:`Member` objects, and every consumer (inspection, flattening
for ``kiln export --format sif``) applies the same rules:

* paths are relative to the image root, normalised; ``..`` never climbs above the root
  (:func:`norm_path`), so no path from an archive can name anything outside the image;
* ``.wh.NAME`` deletes ``NAME`` (and everything under it) from the layers below; ``.wh..wh..opq``
  in a folder hides everything the layers below put in it (the OCI image spec's layer changesets;
  overlayfs marks the same with a 0:0 character device and an ``opaque`` extended attribute, which
  :mod:`torchkiln.images.storage` turns into these names' meaning).

Content is read lazily: ``read_head`` / ``read_all`` / ``open_random``. A member's content readers
are valid only until the reader moves to the next member.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from torchkiln.errors import InputError
from torchkiln.images._io import IOStats, MemoryFile, RangeFile

MemberType = Literal["file", "dir", "symlink", "hardlink", "other"]
Whiteout = Literal["file", "opaque"]

WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
#: a streamed member read at random (an ELF file) is held in memory up to this size, beyond it in a
#: deleted temporary file: the biggest library of a CUDA torch image (cuBLASLt, 542 MB in the cu130
#: example) fits, so an export read from a pipe writes nothing to disk
SPOOL_MEMORY = 1 << 30


def norm_path(name: str) -> str:
    """``name`` relative to the image root: no leading ``/``, no ``.``, and ``..`` stops at the root."""
    p = posixpath.normpath("/" + name).lstrip("/")
    return "" if p == "." else p


def whiteout_of(path: str) -> tuple[Whiteout | None, str]:
    """(whiteout kind, the path it applies to) for a normalised entry path; (None, path) for others.

    ``a/.wh.b`` → ("file", "a/b"); ``a/.wh..wh..opq`` → ("opaque", "a").
    """
    parent, base = posixpath.split(path)
    if base == OPAQUE_WHITEOUT:
        return "opaque", parent
    if base.startswith(WHITEOUT_PREFIX) and len(base) > len(WHITEOUT_PREFIX):
        return "file", posixpath.join(parent, base[len(WHITEOUT_PREFIX) :])
    return None, path


@dataclass
class Member:
    """One entry of a layer. Content readers are valid only until the next member is read."""

    path: str
    type: MemberType
    size: int
    mode: int
    linkname: str = ""
    #: for whiteout entries: "file" (deletes ``path``) or "opaque" (hides the lower contents of ``path``)
    whiteout: Whiteout | None = None
    _view: RangeFile | None = field(default=None, repr=False)
    #: a streamed layer (a ForwardReader or Window) and where this member's content starts in it
    _fwd: Any = field(default=None, repr=False)
    _at: int = field(default=0, repr=False)
    #: a regular file in the engine's storage, opened on demand
    _file: str | None = field(default=None, repr=False)
    _head: bytes = field(default=b"", repr=False)
    _stats: IOStats | None = field(default=None, repr=False)

    @property
    def random_access(self) -> bool:
        """Whether the content stays readable after the next member (a view into an archive file, a file
        in the engine's storage), not only while a streamed layer passes."""
        return self._view is not None or self._file is not None

    def read_head(self, n: int) -> bytes:
        """The first ``n`` bytes of a regular file (fewer if it is shorter)."""
        if self._view is not None:
            return self._view.pread(0, n)
        if self._file is not None:
            if len(self._head) < min(n, self.size):  # not read ahead (or not far enough)
                with self._open_file() as f:
                    self._head = f.pread(0, n)
            return self._head[:n]
        if self._fwd is None or self._fwd.tell() != self._at:
            return b""
        return self._fwd.peek(min(n, self.size))  # type: ignore[no-any-return]

    def read_all(self, limit: int = 64 << 20) -> bytes:
        """The whole content of a (small) regular file."""
        if self.size > limit:
            raise InputError(f"{self.path} is {self.size} bytes, more than the {limit} expected.")
        if self._view is not None:
            return self._view.pread(0, self.size)
        if self._file is not None:
            with self._open_file() as f:
                return f.pread(0, self.size)
        buf = self._take(self.size)
        return bytes(buf)

    def open_random(self) -> IO[bytes]:
        """A seekable file object over the content (the caller closes it): a view, the file itself,
        or, for a streamed layer, the content read once into memory (up to ``SPOOL_MEMORY``; beyond,
        into a deleted temporary file)."""
        if self._view is not None:
            return self._view.sub(0, self._view.size)  # type: ignore[return-value]
        if self._file is not None:
            return self._open_file()  # type: ignore[return-value]
        if self.size <= SPOOL_MEMORY:
            return MemoryFile(self._take(self.size, _scratch(self._fwd, self.size)))  # type: ignore[return-value]
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - caller closes
        chunk = bytearray(8 << 20)
        left = self.size
        while left > 0:
            got = self._take(min(left, len(chunk)), chunk)
            if not got:
                break
            spool.write(got)
            left -= len(got)
        spool.seek(0)
        return spool

    def _take(self, n: int, into: bytearray | memoryview | None = None) -> memoryview | bytearray:
        """The next ``n`` bytes of a streamed member's content (consumed: read once, in order)."""
        if self._fwd is None or n <= 0:
            return bytearray()
        if self._fwd.tell() != self._at:
            raise InputError(f"/{self.path} was read after the layer moved past it (a bug: please report it).")
        buf = into if into is not None else bytearray(n)
        view = memoryview(buf).cast("B")[:n]
        got = self._fwd.readinto(view)
        self._at += got
        if got < n:
            raise InputError(f"/{self.path} is truncated ({self.size} bytes expected).",
                             hint="Save or download the image again.")
        return view if into is not None else buf

    def _open_file(self) -> RangeFile:
        assert self._file is not None
        try:
            fd = os.open(self._file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            raise InputError(f"cannot read /{self.path} in the engine's storage ({e.strerror}).") from None
        return RangeFile(fd, 0, os.fstat(fd).st_size, self._stats, owns_fd=True)


def _scratch(reader: Any, size: int) -> bytearray | memoryview:
    """A buffer of ``size`` bytes for one streamed member, reused across the members of a stream
    (one big library after another would each fault in fresh pages otherwise); a fresh one while
    the last is still held open."""
    held = getattr(reader, "_kiln_scratch", None)
    if held is not None and not MemoryFile.in_use(held):
        if len(held) < size:
            held = bytearray(size)
            reader._kiln_scratch = held
        return memoryview(held)[:size]
    if held is None:
        held = bytearray(size)
        reader._kiln_scratch = held
        return memoryview(held)[:size]
    return bytearray(size)


def member_of(ti: tarfile.TarInfo) -> Member:
    """A :class:`Member` (content not attached) for one tar header, whiteouts recognised."""
    path = norm_path(ti.name)
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
        m.linkname = norm_path(ti.linkname)
    elif mtype == "symlink":
        m.linkname = ti.linkname
    kind, target = whiteout_of(path)
    if kind is not None:
        m.whiteout, m.path = kind, target
    return m
