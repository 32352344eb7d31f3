"""Apply image layers, in order, to a directory: the root file system of ``kiln export --format sif``.

Our own code because no maintained Python library applies OCI/Docker layer diffs into a directory.
The diff rules (whiteouts, path normalisation) are :mod:`torchkiln.images.layers`'; each layer is
read once as a stream; every path is resolved inside the new root (symlinks are followed as if the
root were ``/``, ``..`` stops at the root), so no layer can write outside it. Ownership is kept when
running as root (otherwise the squashfs is made ``-all-root``, as apptainer does); device nodes are
made only as root; extended attributes are not carried over.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from torchkiln.errors import InputError
from torchkiln.images.layers import norm_path, whiteout_of

_MAX_LINKS = 40
_CHUNK = 1 << 20


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
        make_writable(p)
        shutil.rmtree(p)
    elif p.is_symlink() or p.exists():
        p.unlink()


def make_writable(top: Path) -> None:
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
        name = norm_path(m.name)
        if not name:
            return
        kind, target = whiteout_of(name)
        if kind is not None:
            if kind == "opaque":
                d = self.resolve(target, create=False)
                if d is not None:
                    for child in list(d.iterdir()):
                        if str(child) not in self._layer:
                            _remove(child)
            else:
                tparent, tbase = os.path.split(target)
                d = self.resolve(tparent, create=False)
                if d is not None and tbase:
                    _remove(d / tbase)
            self.stats.whiteouts += 1
            return
        parent_rel, base = os.path.split(name)
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
            lname = norm_path(m.linkname)
            lparent, lbase = os.path.split(lname)
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


def flatten(layers: Iterable[IO[bytes]], root: Path, progress: Callable[[int], None] | None = None) -> FlattenStats:
    """Apply each layer tar stream, in order from the base, to ``root`` (an empty directory)."""
    f = Flattener(root)
    for i, stream in enumerate(layers):
        if progress:
            progress(i)
        f.apply(stream)
    return f.finish()
