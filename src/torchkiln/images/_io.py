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
