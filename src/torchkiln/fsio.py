"""Safe file I/O: the one way torchkiln reads a small file it is given and writes a file it makes.

* ``read_text`` refuses what is not a regular file (a FIFO would hang, ``/dev/zero`` would fill the
  memory, a folder is not a file), caps the size read, and decodes UTF-8 strictly; every refusal is
  the caller's typed error (a ``SpecError`` for kiln.toml, a ``LockError`` for kiln.lock) with a fix.
* ``write_atomic`` writes a temporary file in the destination's folder, fsyncs it and renames it over
  the destination: a reader sees the old file or the new one, never a part; a failure (a full disk,
  Ctrl-C) removes the temporary file and leaves the old file as it was. A destination that exists and
  is not a regular file (a folder, a FIFO, a device) is refused, never written through.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from torchkiln.errors import FilesError, KilnError

#: the most a spec, lock or configuration file may hold (the largest real lock is ~200 KB)
MAX_TEXT_BYTES = 16 * 1024 * 1024

ErrorFactory = Callable[[str, str], KilnError]


def _files_error(message: str, hint: str) -> KilnError:
    return FilesError(message, hint=hint)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: Path, *, what: str, limit: int = MAX_TEXT_BYTES, error: ErrorFactory = _files_error,
               hint: str = "") -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); anything else is ``error(message, hint)``.

    The file is opened non-blocking, so a FIFO is refused instead of waiting for a writer; a symlink is
    followed, and what it names must be a regular file too. ``OSError`` (missing, no permission)
    propagates for the caller to turn into its own error.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is {_kind(st.st_mode)}, not a file torchkiln can read.",
                        hint or f"Replace {path} with a regular file.")
        if st.st_size > limit:
            raise error(f"{what} {path} is {st.st_size:,} bytes; more than {limit:,} is not a real {what}.",
                        hint or f"Replace {path} with the real file.")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # it grew while read (a file still being written)
            raise error(f"{what} {path} holds more than {limit:,} bytes.",
                        hint or f"Replace {path} with the real file.")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path, *, what: str, limit: int = MAX_TEXT_BYTES, error: ErrorFactory = _files_error,
              hint: str = "") -> str:
    """``read_bytes`` decoded as UTF-8 (strict): invalid bytes are ``error``, not a traceback."""
    data = read_bytes(path, what=what, limit=limit, error=error, hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise error(f"{what} {path} is not UTF-8 text (byte {e.start}, line {line}).",
                    hint or f"Save {path} as UTF-8, or replace it.") from None


def check_writable_target(path: Path, *, what: str = "file") -> None:
    """Refuse a destination that exists and is not a regular file (or a symlink to one)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError:
        return  # a dangling symlink or no permission: the write itself says why
    if not stat.S_ISREG(st.st_mode):
        raise FilesError(f"{path} is {_kind(st.st_mode)}; torchkiln writes its {what} only as a regular file "
                         "and does not write through it.",
                         hint=f"Remove or rename {path}, or give another path.")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o644, what: str = "file",
                 exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all (temp file in the same folder, fsync, rename).

    ``exclusive``: fail with ``FileExistsError`` if ``path`` exists when the file is put in place
    (``kiln init`` never overwrites a spec). On any failure the temporary file is removed.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    check_writable_target(path, what=what)
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode & ~_umask())
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(tmp, path)  # fails if path exists: never replaces one
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)
    return path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_private(path: Path, data: bytes | str) -> Path:
    """Create ``path`` readable by its owner only (0600 from the first byte, never widened) and write ``data``:
    for files that hold credentials (a uv.toml with an index token). Fails if ``path`` exists."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    return path
