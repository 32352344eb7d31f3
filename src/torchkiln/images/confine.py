"""Every write of an extraction confined to one root folder, openat-style.

``Confined(root)`` holds a descriptor of the root; every path an image names is walked from it one
component at a time with ``O_NOFOLLOW``: a symlink met on the way is followed *as if the root were
/* (an absolute target restarts at the root, ``..`` stops there), never by the kernel, so no
component can lead outside. What is written (files, folders, links, devices) is created relative to
the descriptor of its parent folder, and metadata is applied through a descriptor of the very
file written (or with ``AT_SYMLINK_NOFOLLOW``), never through a path whose parent may since have
become a symlink. Directory modes and times, applied last, are applied by re-opening the folder with
``O_NOFOLLOW`` at every component: a folder whose parent became a symlink is skipped.

Walks are iterative (no recursion limit on deep trees); names a file system cannot hold (too long)
and links a file system cannot make (a hard link to a folder) are ``InputError``, the image's fault.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from torchkiln.errors import InputError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40
#: a path an image may name: PATH_MAX (4096) bytes hold at most 2048 one-letter components
MAX_DEPTH = 2048


def _lstat(name: str, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _bad_name(name: str, e: OSError, what: str) -> InputError:
    why = {errno.ENAMETOOLONG: "a name longer than the file system allows",
           errno.EPERM: "an entry the file system refuses", errno.EMLINK: "too many links to one file"}
    return InputError(f"the image's {what} {name!r} cannot be written: {why.get(e.errno or 0, e.strerror)}.",
                      hint="The image is malformed; rebuild it, or export another image.")


class Confined:
    """A root folder; every method names paths relative to it and never leaves it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Confined:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- finding folders -------------------------------------------------------------------------------
    def open_real(self, names: list[str]) -> int | None:
        """A descriptor of ``root/names...`` when every component is a real folder (no symlink at all), else None."""
        fd = os.dup(self.fd)
        for name in names:
            try:
                nfd = os.open(name, _DIR, dir_fd=fd)
            except OSError:
                os.close(fd)
                return None
            os.close(fd)
            fd = nfd
        return fd

    def walk(self, rel: str, *, create: bool) -> tuple[int, list[str]] | None:
        """(descriptor, real component names) of the folder ``rel`` names, symlinks followed inside the root.

        ``create``: make missing folders, and replace a non-folder on the way by one (a layer puts a folder
        where a lower one had a file). None when it does not exist (and ``create`` is False). The caller
        closes the descriptor.
        """
        stack = [p for p in reversed(rel.split("/")) if p not in ("", ".")]
        names: list[str] = []
        fd = os.dup(self.fd)
        links = 0
        try:
            while stack:
                part = stack.pop()
                if part == "..":
                    if names:
                        names.pop()
                        os.close(fd)
                        fd = -1
                        reopened = self.open_real(names)
                        if reopened is None:  # pragma: no cover - our own folders changed under us
                            raise InputError(f"/{rel} in the image cannot be resolved.")
                        fd = reopened
                    continue
                st = _lstat(part, fd)
                if st is not None and stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise InputError(f"too many levels of symbolic links under /{rel} in the image.",
                                         hint="The image is malformed (a symlink loop); rebuild it.")
                    target = os.readlink(part, dir_fd=fd)
                    if target.startswith("/"):
                        names = []
                        os.close(fd)
                        fd = -1
                        fd = os.dup(self.fd)
                    stack.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
                    continue
                if st is None or not stat.S_ISDIR(st.st_mode):
                    if not create:
                        os.close(fd)
                        return None
                    if st is not None:
                        os.unlink(part, dir_fd=fd)  # a layer puts a folder where a lower one had a file
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except OSError as e:
                        if e.errno == errno.ENAMETOOLONG:
                            raise _bad_name(part, e, "folder") from None
                        raise
                if len(names) >= MAX_DEPTH:
                    raise InputError(f"/{rel[:200]}... in the image is nested more than {MAX_DEPTH} folders deep.",
                                     hint="The image is malformed; rebuild it.")
                nfd = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = nfd
                names.append(part)
            return fd, names
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise

    @contextlib.contextmanager
    def folder(self, rel: str, *, create: bool) -> Iterator[tuple[int, list[str]] | None]:
        got = self.walk(rel, create=create)
        try:
            yield got
        finally:
            if got is not None:
                os.close(got[0])


def check_name(name: str, entry: str) -> None:
    """An entry's own name must be a name: not empty, ``.`` or ``..`` (a whiteout of ``..`` would remove the parent)."""
    if name in ("", ".", "..") or "/" in name:
        raise InputError(f"the image's entry {entry!r} names {name!r}, which is not a file name.",
                         hint="The image is malformed; rebuild it, or export another image.")


def remove_at(fd: int, name: str) -> None:
    """Remove ``name`` in the folder ``fd`` (a whole tree for a folder), following no symlink; gone is fine."""
    st = _lstat(name, fd)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=fd)
        return
    rmtree_at(fd, name)


def rmtree_at(parent: int, name: str) -> None:
    """Remove the folder ``name`` of ``parent`` and all it holds (iterative, descriptor-relative, no symlink
    followed)."""
    top = os.open(name, _DIR, dir_fd=parent)
    # each level: (its descriptor, its name in the level above, the sub-folders still to remove)
    stack: list[tuple[int, str, list[str]]] = []

    def enter(fd: int, label: str) -> None:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)  # a folder of mode 0 could not be emptied as a non-root user
        subdirs: list[str] = []
        with os.scandir(fd) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
        stack.append((fd, label, subdirs))

    try:
        enter(top, name)
        while stack:
            fd, label, subdirs = stack[-1]
            if subdirs:
                child = subdirs.pop()
                enter(os.open(child, _DIR, dir_fd=fd), child)
                continue
            stack.pop()
            os.close(fd)
            os.rmdir(label, dir_fd=stack[-1][0] if stack else parent)
    except BaseException:
        for fd, _label, _subdirs in stack:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise


def rmtree(path: Path) -> None:
    """Remove the folder ``path`` (an extraction root) whatever it holds: modes, depth and symlinks included."""
    if not path.exists() and not path.is_symlink():
        return
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        remove_at(parent, path.name)
    finally:
        os.close(parent)
