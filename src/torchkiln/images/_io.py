"""Random-access views into large files, and the counters that say where inspection spent its time.

``RangeFile`` is a read-only, seekable file object over a byte range of another file (a layer
inside an image tar, a file inside a layer): reads go through ``os.pread`` so that many views can
share one descriptor without fighting over a file position. ``IOStats`` accumulates the bytes and
seconds spent reading (I/O and decompression), so that ``bench/bench_inspect.py`` can report the
share of reading against parsing.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from typing import Protocol


@dataclass
class IOStats:
    """Bytes read and seconds spent reading (including decompression), summed over a run."""

    bytes_read: int = 0
    read_seconds: float = 0.0
    calls: int = 0

    def add(self, nbytes: int, seconds: float) -> None:
        self.bytes_read += nbytes
        self.read_seconds += seconds
        self.calls += 1


class RangeFile(io.RawIOBase):
    """A read-only seekable view of ``size`` bytes starting at ``offset`` of an open file."""

    def __init__(
        self, fd: int, offset: int, size: int, stats: IOStats | None = None, *, owns_fd: bool = False
    ) -> None:
        super().__init__()
        self._fd = fd
        #: close ``fd`` with the view (a file opened for this view alone)
        self._owns_fd = owns_fd
        self._base = offset
        self._size = size
        self._pos = 0
        self._stats = stats

    # -- file object protocol ----------------------------------------------------------------
    def close(self) -> None:
        if self._owns_fd and not self.closed:
            os.close(self._fd)
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.pread(self._pos, len(buffer))
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = max(self._size - self._pos, 0)
        data = self.pread(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    # -- random access ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    def pread(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` of the view (fewer at its end), without moving."""
        if offset >= self._size or size <= 0:
            return b""
        size = min(size, self._size - offset)
        t = time.perf_counter()
        data = os.pread(self._fd, size, self._base + offset)
        if self._stats is not None:
            self._stats.add(len(data), time.perf_counter() - t)
        return data

    def sub(self, offset: int, size: int) -> RangeFile:
        """A view of part of this view."""
        return RangeFile(self._fd, self._base + offset, min(size, max(self._size - offset, 0)), self._stats)


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class TimedReader(io.RawIOBase):
    """Wrap a sequential binary stream (e.g. a decompressor) and count its reads as reading time."""

    def __init__(self, raw: _Readable, stats: IOStats | None) -> None:
        super().__init__()
        self._raw = raw
        self._stats = stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        t = time.perf_counter()
        data = self._raw.read(size)
        if self._stats is not None:
            self._stats.add(len(data), time.perf_counter() - t)
        return data


class ForwardReader(io.RawIOBase):
    """A stream read once, front to back, with ``seek`` forward: what :class:`tarfile.TarFile` needs
    to walk a tar from a pipe in its random-access mode, without its stream mode's copies.

    Python's stream-mode tar reader (``r|``) keeps a 1 MiB buffer and slices it on every read, so
    each 512-byte header costs a copy of the rest of the buffer, and skipped members are read and
    copied in full: on an image that was most of its CPU time. Here reads are served from a buffer
    refilled in place (``os.readv`` into a ``bytearray``), a read copies only what it returns, and
    a forward ``seek`` over content nobody asks for moves it from the pipe to ``/dev/null`` in the
    kernel (``os.splice``), never through Python. ``source`` is a file descriptor (a pipe) or a
    readable object (a decompressor); ``tell`` is the number of bytes consumed.
    """

    def __init__(self, source: int | _Readable, buffer_size: int = 4 << 20) -> None:
        super().__init__()
        self._fd = source if isinstance(source, int) else -1
        self._src = None if isinstance(source, int) else source
        self._buf = bytearray(buffer_size)
        self._lo = self._hi = 0
        self._pos = 0
        self._eof = False
        self._null = -1
        self._splice = self._fd >= 0 and hasattr(os, "splice") and _is_pipe(self._fd)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forward only; tarfile's random-access mode seeks forward alone on one pass

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if self._null >= 0:
            os.close(self._null)
            self._null = -1
        super().close()

    def _fill(self) -> int:
        """Read more into the buffer (after what it holds); bytes read, 0 at the end."""
        if self._eof:
            return 0
        if self._lo == self._hi:
            self._lo = self._hi = 0
        elif self._hi == len(self._buf):
            n = self._hi - self._lo
            self._buf[:n] = self._buf[self._lo:self._hi]
            self._lo, self._hi = 0, n
        view = memoryview(self._buf)[self._hi:]
        got = self._read_once(view)
        view.release()
        self._hi += got
        return got

    def _read_once(self, view: memoryview) -> int:
        """One read from the source into ``view`` (a pipe's ``readv``, or the object's ``read``); 0 at
        the end of the stream, which is then marked."""
        if self._fd >= 0:
            got = os.readv(self._fd, [view])
        else:
            assert self._src is not None
            data = self._src.read(len(view))
            got = len(data)
            view[:got] = data
        if got == 0:
            self._eof = True
        return got

    def _read_into(self, view: memoryview, n: int) -> int:
        """Fill ``view`` from byte ``n`` on straight from the source, past the buffer, until it is full
        or the stream ends; returns how much of it is filled."""
        while n < len(view) and not self._eof:
            n += self._read_once(view[n:])
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while chunk := self.read(len(self._buf)):
                chunks.append(chunk)
            return b"".join(chunks)
        if self._hi - self._lo >= size:
            out = bytes(self._buf[self._lo:self._lo + size])
            self._lo += size
            self._pos += size
            return out
        if size <= len(self._buf) // 2:
            while self._hi - self._lo < size and self._fill():
                pass
            n = min(size, self._hi - self._lo)
            out = bytes(self._buf[self._lo:self._lo + n])
            self._lo += n
            self._pos += n
            return out
        # a large read (a file's whole content): what is buffered, then straight into the result
        out_buf = bytearray(size)
        n = self._hi - self._lo
        out_buf[:n] = self._buf[self._lo:self._hi]
        self._lo = self._hi = 0
        view = memoryview(out_buf)
        n = self._read_into(view, n)
        view.release()
        self._pos += n
        return bytes(out_buf) if n == size else bytes(out_buf[:n])

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        """Fill ``buffer`` (all of it unless the stream ends): what is buffered, then straight from
        the source into it, with no copy in between."""
        view = memoryview(buffer).cast("B")
        size = len(view)
        n = min(size, self._hi - self._lo)
        view[:n] = self._buf[self._lo:self._lo + n]
        self._lo += n
        n = self._read_into(view, n)
        view.release()
        self._pos += n
        return n

    def peek(self, size: int) -> bytes:
        """Up to ``size`` bytes ahead (at most the buffer's size), without consuming them."""
        size = min(size, len(self._buf))
        while self._hi - self._lo < size and self._fill():
            pass
        return bytes(self._buf[self._lo:self._lo + size])

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a forward reader cannot seek from the end")
        skip = offset - self._pos
        if skip < 0:
            raise io.UnsupportedOperation(f"a forward reader cannot seek back ({self._pos} -> {offset})")
        buffered = min(skip, self._hi - self._lo)
        self._lo += buffered
        self._pos += buffered
        skip -= buffered
        while skip > 0 and not self._eof:
            got = self._discard(skip)
            if got == 0:
                self._eof = True
            skip -= got
            self._pos += got
        return self._pos

    def _discard(self, n: int) -> int:
        if self._splice:
            if self._null < 0:
                self._null = os.open(os.devnull, os.O_WRONLY)
            try:
                return os.splice(self._fd, self._null, min(n, 1 << 30))
            except OSError:
                self._splice = False
        got = self._fill() if self._hi - self._lo == 0 else 0
        k = min(n, self._hi - self._lo)
        self._lo += k
        return k if k or got else 0


class Window(io.RawIOBase):
    """``size`` bytes of a :class:`ForwardReader` from its current position: one member's content
    as a stream of its own (a layer tar inside an image tar), forward-seekable like its reader."""

    def __init__(self, outer: ForwardReader, size: int) -> None:
        super().__init__()
        self._outer = outer
        self._start = outer.tell()
        self._size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._outer.tell() - self._start

    def peek(self, size: int) -> bytes:
        return self._outer.peek(min(size, self._size - self.tell()))

    def read(self, size: int = -1) -> bytes:
        left = self._size - self.tell()
        size = left if size is None or size < 0 else min(size, left)
        return self._outer.read(size) if size > 0 else b""

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        left = self._size - self.tell()
        view = memoryview(buffer).cast("B")
        n = self._outer.readinto(view[:left]) if left > 0 else 0
        view.release()
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.tell()
        elif whence == io.SEEK_END:
            offset += self._size
        self._outer.seek(self._start + min(offset, self._size))
        return self.tell()


def _is_pipe(fd: int) -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


class MemoryFile(io.RawIOBase):
    """A read-only seekable file over bytes in memory, with ``pread`` (what the ELF readers use):
    a streamed member's content, read into one buffer once, is never copied again."""

    #: ids of the buffers an open MemoryFile reads (a buffer reused for the next member must not be)
    _open: dict[int, int] = {}

    def __init__(self, data: bytearray | bytes | memoryview) -> None:
        super().__init__()
        self._data = memoryview(data).cast("B")
        self._key = id(data.obj) if isinstance(data, memoryview) else id(data)
        MemoryFile._open[self._key] = MemoryFile._open.get(self._key, 0) + 1
        self._pos = 0

    @staticmethod
    def in_use(buffer: object) -> bool:
        return MemoryFile._open.get(id(buffer), 0) > 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def pread(self, offset: int, size: int) -> bytes:
        if offset < 0 or size <= 0 or offset >= len(self._data):
            return b""
        return bytes(self._data[offset:offset + size])

    def read(self, size: int = -1) -> bytes:
        size = len(self._data) - self._pos if size is None or size < 0 else size
        data = self.pread(self._pos, size)
        self._pos += len(data)
        return data

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            left = MemoryFile._open.get(self._key, 1) - 1
            if left > 0:
                MemoryFile._open[self._key] = left
            else:
                MemoryFile._open.pop(self._key, None)
            self._data.release()
        super().close()
