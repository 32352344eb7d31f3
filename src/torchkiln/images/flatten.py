"""Apply image layers, in order, to a directory: the root file system of ``kiln export --format sif``.

Our own code because no maintained Python library applies OCI/Docker layer diffs into a directory.
The diff rules (whiteouts, path normalisation) are :mod:`torchkiln.images.layers`'; each layer is
read once as a stream; every path is resolved inside the new root by :mod:`torchkiln.images.confine`
(descriptor-relative, ``O_NOFOLLOW``; symlinks are followed as if the root were ``/``, ``..`` stops
at the root), and metadata is applied through the descriptor of what was written, so no layer (nor a
later layer swapping a folder for a symlink) can write or change anything outside it. Runs of zeros
are written as holes (a sparse file stays sparse) and the disk's free space is checked as data is
written. Ownership is kept when
running as root (otherwise the squashfs is made ``-all-root``, as apptainer does); device nodes are
made only as root; extended attributes are not carried over.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from torchkiln.errors import FilesError, InputError
from torchkiln.images.confine import Confined, _bad_name, check_name, remove_at
from torchkiln.images.layers import norm_path, whiteout_of

_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)
#: free space left untouched on the disk an export writes to (other programs need some)
RESERVE_BYTES = 512 * 1024 * 1024


@dataclass
class FlattenStats:
    layers: int = 0
    files: int = 0
    bytes: int = 0
    whiteouts: int = 0
    skipped_devices: int = 0
    #: bytes of file data actually written (sparse files' holes are not: ``bytes`` counts them)
    allocated: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class Flattener:
    """Applies layer tars, in order, to a root directory; every write stays inside it (``confine``)."""

    def __init__(self, root: Path, *, reserve: int | None = None, max_bytes: int | None = None) -> None:
        self.root = root.resolve()
        self.confined = Confined(self.root)
        self.is_root = os.geteuid() == 0
        self.stats = FlattenStats()
        self._dirs: dict[str, tarfile.TarInfo] = {}
        self._layer: set[str] = set()
        self._reserve = RESERVE_BYTES if reserve is None else reserve
        self._free = free_bytes(self.root) - self._reserve
        self._checked_at = 0
        #: the most the files may claim in all (apparent sizes, holes included): what mksquashfs will read
        self.max_bytes = max_bytes
        self._largest: tuple[int, str] = (0, "")

    def close(self) -> None:
        self.confined.close()

    # path resolution inside the root
    def resolve(self, rel: str, *, create: bool) -> Path | None:
        """The real directory ``rel`` names inside the root (symlinks followed within it), or None."""
        with self.confined.folder(rel, create=create) as got:
            return None if got is None else self.root.joinpath(*got[1])

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
        name = norm_path(m.name)
        if not name:
            return
        kind, target = whiteout_of(name)
        if kind is not None:
            if kind == "opaque":
                with self.confined.folder(target, create=False) as got:
                    if got is not None:
                        fd, names = got
                        for child in os.listdir(fd):
                            if "/".join([*names, child]) not in self._layer:
                                remove_at(fd, child)
            else:
                tparent, tbase = os.path.split(target)
                check_name(tbase, m.name)
                with self.confined.folder(tparent, create=False) as got:
                    if got is not None:
                        remove_at(got[0], tbase)
            self.stats.whiteouts += 1
            return
        parent_rel, base = os.path.split(name)
        check_name(base, m.name)
        with self.confined.folder(parent_rel, create=True) as got:
            assert got is not None
            fd, names = got
            try:
                self._write(tf, m, fd, base, "/".join([*names, base]))
            except OSError as e:
                if e.errno in (errno.ENAMETOOLONG, errno.EMLINK):
                    raise _bad_name(name, e, "entry") from None
                raise

    def _write(self, tf: tarfile.TarFile, m: tarfile.TarInfo, fd: int, base: str, key: str) -> None:
        old = os.stat(base, dir_fd=fd, follow_symlinks=False) if _exists(base, fd) else None
        if old is not None and not (m.isdir() and stat.S_ISDIR(old.st_mode)):
            remove_at(fd, base)
        self._layer.add(key)
        if m.isdir():
            if old is None or not stat.S_ISDIR(old.st_mode):
                os.mkdir(base, 0o755, dir_fd=fd)
            self._dirs[key] = m
            return
        if m.isfile():
            self._budget(m, key)
            src = tf.extractfile(m)
            assert src is not None
            out = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=fd)
            try:
                self._copy(src, out, m)
                self._meta_fd(out, m)
            finally:
                os.close(out)
            self.stats.files += 1
            self.stats.bytes += m.size
            return
        if m.issym():
            os.symlink(m.linkname, base, dir_fd=fd)
        elif m.islnk():
            lname = norm_path(m.linkname)
            lparent, lbase = os.path.split(lname)
            with self.confined.folder(lparent, create=False) as got:
                tst = os.stat(lbase, dir_fd=got[0], follow_symlinks=False) if got and lbase and _exists(lbase, got[0]) \
                    else None
                if got is None or tst is None:
                    raise InputError(f"the image's hard link /{key} points at /{lname}, which no layer holds.",
                                     hint="The image is malformed; rebuild it.")
                if stat.S_ISDIR(tst.st_mode):
                    raise InputError(f"the image's hard link /{key} points at the folder /{lname}; no file system "
                                     "holds a hard link to a folder.", hint="The image is malformed; rebuild it.")
                os.link(lbase, base, src_dir_fd=got[0], dst_dir_fd=fd, follow_symlinks=False)
            return  # shares the target's inode and metadata
        elif m.ischr() or m.isblk() or m.isfifo():
            if not self.is_root and not m.isfifo():
                self.stats.skipped_devices += 1
                return
            kind = stat.S_IFCHR if m.ischr() else stat.S_IFBLK if m.isblk() else stat.S_IFIFO
            os.mknod(base, kind | (m.mode & 0o7777), os.makedev(m.devmajor, m.devminor), dir_fd=fd)
        else:
            return
        self._meta_at(fd, base, m)

    def _budget(self, m: tarfile.TarInfo, key: str) -> None:
        """Refuse an image whose files claim more than ``max_bytes`` in all (a "disk bomb": a 30 KB archive can hold
        a 100 GB sparse file), before any of it is written or squashed."""
        self._largest = max(self._largest, (m.size, key))
        if self.max_bytes is None or self.stats.bytes + m.size <= self.max_bytes:
            return
        size, path = self._largest
        raise InputError(
            f"the image's files claim more than {self.max_bytes / 1e9:.1f} GB (the largest, /{path}, "
            f"{size / 1e9:.1f} GB), far more than its layers hold: mksquashfs would read every byte of it, "
            "holes included; nothing was exported.",
            hint="Remove the giant (often sparse) file from the image and build it again; if it is meant to be "
                 f"there, allow it with KILN_EXPORT_MAX_BYTES={int((self.stats.bytes + m.size) * 1.1)}.",
        )

    def _copy(self, src: IO[bytes], out: int, m: tarfile.TarInfo) -> None:
        """The file's bytes into ``out``: runs of zeros become holes (a sparse file stays sparse), and the disk's
        free space is checked as data is written (an image that expands past it is refused, not written out)."""
        if m.sparse is None:
            self._copy_region(src, out, m.size, m)
        else:  # a sparse member: only its data regions are read (a 100 GB hole costs nothing)
            raw = getattr(src, "raw", src)  # tarfile's member reader: seeks within the member, not the stream
            regions: list[tuple[int, int]] = list(m.sparse)  # type: ignore[arg-type]  # typeshed: bytes; tarfile: (offset, size) pairs
            for offset, size in regions:
                raw.seek(offset)
                os.lseek(out, offset, os.SEEK_SET)
                self._copy_region(raw, out, size, m)
        os.ftruncate(out, m.size)

    def _copy_region(self, src: IO[bytes], out: int, size: int, m: tarfile.TarInfo) -> None:
        left = size
        while left > 0 and (chunk := src.read(min(_CHUNK, left))):
            left -= len(chunk)
            if chunk == _ZEROS[: len(chunk)]:
                os.lseek(out, len(chunk), os.SEEK_CUR)
                continue
            self.stats.allocated += len(chunk)
            if self.stats.allocated - self._checked_at >= 64 * _CHUNK or len(chunk) > self._free:
                self._free = free_bytes(self.root) - self._reserve
                self._checked_at = self.stats.allocated
            self._free -= len(chunk)
            if self._free < 0:
                raise FilesError(
                    f"the image's files need more room than the disk of {self.root.parent} has free "
                    f"(written so far: {self.stats.allocated / 1e9:.2f} GB, while /{m.name.lstrip('/')} was "
                    "written); nothing was exported.",
                    hint="Free space there, or write the export to a disk with more room (-o elsewhere, or "
                         "TMPDIR for the temporary root file system).")
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]

    def _meta_fd(self, fd: int, m: tarfile.TarInfo) -> None:
        if self.is_root:
            os.fchown(fd, m.uid, m.gid)
        os.fchmod(fd, m.mode & 0o7777)
        os.utime(fd, (m.mtime, m.mtime))

    def _meta_at(self, fd: int, base: str, m: tarfile.TarInfo) -> None:
        if self.is_root:
            os.chown(base, m.uid, m.gid, dir_fd=fd, follow_symlinks=False)
        if not m.issym():  # a device or FIFO we just made here (never a symlink): chmod cannot follow one
            os.chmod(base, m.mode & 0o7777, dir_fd=fd)
        os.utime(base, (m.mtime, m.mtime), dir_fd=fd, follow_symlinks=False)

    def finish(self) -> FlattenStats:
        """Directory modes and times last (children were written into them meanwhile), deepest first; each folder
        is re-opened with no symlink followed, so one whose parent became a symlink is skipped, not followed."""
        for key in sorted(self._dirs, key=lambda s: s.count("/"), reverse=True):
            fd = self.confined.open_real(key.split("/"))
            if fd is None:
                continue
            try:
                self._meta_fd(fd, self._dirs[key])
            finally:
                os.close(fd)
        self._dirs.clear()
        return self.stats


def _exists(name: str, fd: int) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def export_budget(layer_bytes: int) -> int:
    """The most an image's files may claim in all, from what its layers hold: 32 times that plus 1 GiB (real
    images: 2-4 times), or ``KILN_EXPORT_MAX_BYTES``."""
    override = os.environ.get("KILN_EXPORT_MAX_BYTES", "").strip()
    if override.isdigit():
        return int(override)
    return 32 * layer_bytes + (1 << 30)


def flatten(layers: Iterable[IO[bytes]], root: Path, progress: Callable[[int], None] | None = None, *,
            max_bytes: int | None = None) -> FlattenStats:
    """Apply each layer tar stream, in order from the base, to ``root`` (an empty directory)."""
    f = Flattener(root, max_bytes=max_bytes)
    try:
        for i, stream in enumerate(layers):
            if progress:
                progress(i)
            f.apply(stream)
        return f.finish()
    finally:
        f.close()
