"""Read the list of CUDA device-code entries (SASS cubins, PTX, LTO-IR) embedded in an ELF file.

This is our own code: no maintained library reads CUDA fat binaries. NVIDIA documents the format
only through ``fatbinary_section.h`` (shipped with the toolkit) and ``cuobjdump``; the layout below
was checked against nvcc 13.0 output and ``cuobjdump --list-elf --list-ptx`` on real libraries.

**This module must stay stdlib-only**: ``kiln verify`` copies this one file into images that have
nothing but the standard library and torch. Do not import anything from torchkiln (or any
third-party package) here. For the same reason, and for speed, the ELF section table is read by a
small struct-based reader (:func:`elf_sections`) rather than pyelftools, whose parser costs about
12 ms per file; the tests check that reader against pyelftools.

Where fat binaries live in an ELF file
--------------------------------------
``.nv_fatbin``
    One or more *containers* back to back (each 8-byte aligned, zero padding in between). An
    nvcc-built shared object usually has two: nvlink's device-link output, then the source's own.
    This is what the CUDA runtime loads.
``__nv_relfatbin``
    Containers of relocatable device code (``-rdc``, LTO). In a relocatable object (``.o``) it is the
    only fat binary; in a linked library it is left over and never loaded.
``.nvFatBinSegment``
    24-byte wrapper records (u32 magic ``0x466243B1``, u32 version, u64 pointer to a container,
    u64 pointer). Not needed for listing.

``cuobjdump --list-elf --list-ptx`` lists the containers of ``.nv_fatbin`` in file order, or, when the
file has no ``.nv_fatbin``, those of ``__nv_relfatbin``; ``cuobjdump -all`` lists both (``.nv_fatbin``
first). :func:`list_entries` follows the same rule (``all_sections=True`` for ``-all``).

When the section headers are stripped the file is scanned for the container magic instead, and
each hit is validated: the header fields must be sane and the entry headers must tile the
container exactly. Such a scan cannot tell the sections apart, so it returns the entries of every
container it finds (``section`` is then ``""``), including relocatable device code and fat binaries
that libraries embed as private resources (cuBLAS keeps some in ``.cask_resource``), which
cuobjdump skips.

Container header (16 bytes, little-endian)
------------------------------------------
======  =====  ==========================================================
offset  type   field
======  =====  ==========================================================
0x00    u32    magic ``0xBA55ED50``
0x04    u16    version (1)
0x06    u16    header size (0x10)
0x08    u64    size of the entries that follow; the next container starts
               at ``offset + header_size + size`` (then 8-byte aligned)
======  =====  ==========================================================

Entry header (the first at container + header size; the next at ``entry + header_size +
payload_size``)
--------------------------------------------------------------------------------------------
======  =====  ==========================================================
offset  type   field
======  =====  ==========================================================
0x00    u16    kind: 1 PTX, 2 ELF (cubin = SASS), 8 NVVM / LTO-IR
0x02    u16    entry format version (0x0101)
0x04    u32    header size: varies (64, 80, 96, 104, 112 seen), always use it
0x08    u64    payload size in the container (padded to 8)
0x10    u32    exact compressed size, 0 when not compressed
0x14    u32    offset from the entry of an 8-byte {u32 offset, u32 length} options record, 0 = none
0x18    u16    code version minor (PTX ISA minor for PTX, ELF ABI minor for cubins)
0x1A    u16    code version major
0x1C    u32    SM architecture number: 75, 80, 90, 100, 103, 110, 120, 121 ...
0x20    u32    identifier (source name) offset from the entry, 0 = none
0x24    u32    identifier length
0x28    u64    flags (below)
0x30    u64    reserved
0x38    u64    uncompressed size, 0 when not compressed
======  =====  ==========================================================

Flags: ``0x1`` 64-bit, ``0x2`` debug, ``0x10`` host Linux, ``0x2000`` LZ4-compressed payload,
``0x8000`` zstd-compressed payload, ``0x100000`` arch-specific target (``sm_90a``), ``0x200000``
family target (``sm_100f``; cuobjdump names such cubins ``sm_100`` but such PTX ``sm_100f``),
``0x1000000`` set on sm_100+ cubins (meaning unknown). Compression never touches the entry header, so listing needs no
decompression: this module reads only the headers (about 80 bytes per entry), never the payloads.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Literal, Protocol, Union

__all__ = [
    "CONTAINER_MAGIC",
    "FATBIN_SECTIONS",
    "BinaryFile",
    "ElfSection",
    "FatbinEntry",
    "FatbinError",
    "FatbinListing",
    "NotElfError",
    "Opened",
    "cuobjdump_lines",
    "elf_sections",
    "list_entries",
    "read_embedded",
    "read_fatbins",
    "scan_containers",
]

CONTAINER_MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", CONTAINER_MAGIC)
ELF_MAGIC = b"\x7fELF"
#: sections holding fat binaries, in the order cuobjdump ``-all`` lists them
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # the fixed 64-byte part of an entry header

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2
FLAG_LINUX = 0x10
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000

_KINDS: dict[int, Kind] = {1: "ptx", 2: "sass", 8: "ltoir"}
# sanity bounds used to validate headers (generous: real headers are 64..128 bytes)
_MIN_ENTRY_HEADER = _ENTRY.size
_MAX_ENTRY_HEADER = 4096
_SCAN_CHUNK = 16 << 20

Kind = Literal["sass", "ptx", "ltoir", "unknown"]


class BinaryFile(Protocol):
    """What a file object given to :func:`read_fatbins` must offer (any seekable binary file)."""

    def read(self, size: int = ..., /) -> bytes: ...
    def seek(self, offset: int, whence: int = ..., /) -> int: ...
    def seekable(self) -> bool: ...


Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, BinaryFile]
ReadAt = Callable[[int, int], bytes]


class FatbinError(ValueError):
    """The file's ELF structure or one of its fat binaries is corrupt or truncated."""


class NotElfError(FatbinError):
    """The file is not an ELF file at all."""


@dataclass(frozen=True)
class FatbinEntry:
    """One embedded piece of device code, as described by its entry header."""

    kind: Kind
    #: SM number as stored: 90 for sm_90 / sm_90a / compute_90
    sm: int
    #: "a" for arch-specific targets, "f" for family targets, "" otherwise
    suffix: Literal["", "a", "f"]
    compressed: bool
    #: "zstd", "lz4", "unknown" (compressed but no known flag) or None
    compression: str | None
    #: ".nv_fatbin", "__nv_relfatbin", or "" when found by a magic scan
    section: str
    #: index of the container in the file (in listing order)
    container: int
    #: file offset of the entry header
    offset: int
    header_size: int
    payload_size: int
    compressed_size: int
    uncompressed_size: int
    flags: int
    #: code version: PTX ISA version for PTX (e.g. (9, 0)), ELF ABI version for cubins
    code_version: tuple[int, int]
    identifier: str | None = None

    @property
    def arch(self) -> str:
        """``sm_90``, ``sm_90a``, ``sm_100f`` for SASS; ``compute_90`` for PTX and LTO-IR."""
        prefix = "sm_" if self.kind == "sass" else "compute_"
        return f"{prefix}{self.sm}{self.suffix}"

    @property
    def cuobjdump_arch(self) -> str:
        """The name cuobjdump's listing uses: always ``sm_``; a family cubin's ``f`` is not shown.

        (cuobjdump 13 prints ``sm_100`` for an ``sm_100f`` cubin but ``sm_100f`` for its PTX.)
        """
        if self.kind == "sass" and self.suffix == "f":
            return f"sm_{self.sm}"
        return f"sm_{self.sm}{self.suffix}"

    @property
    def debug(self) -> bool:
        return bool(self.flags & FLAG_DEBUG)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "arch": self.arch,
            "compressed": self.compressed,
            "compression": self.compression,
            "section": self.section,
            "container": self.container,
            "offset": self.offset,
            "size": self.payload_size,
            "uncompressed_size": self.uncompressed_size if self.compressed else self.payload_size,
            "code_version": f"{self.code_version[0]}.{self.code_version[1]}",
            "debug": self.debug,
            "identifier": self.identifier,
        }


@dataclass(frozen=True)
class FatbinListing:
    """What :func:`read_fatbins` found in one file."""

    entries: tuple[FatbinEntry, ...]
    #: "sections" (section headers were read) or "scan" (validated magic scan)
    method: Literal["sections", "scan"]
    #: fat-binary sections present in the file (empty after a scan)
    sections: tuple[str, ...]
    #: ELF e_type: 1 relocatable, 2 executable, 3 shared object (or PIE), 4 core
    elf_type: int
    #: ELF e_machine: 62 x86-64, 183 AArch64, 21 PowerPC64 ...
    machine: int


def _parse_container(
    read_at: ReadAt, offset: int, limit: int, section: str, index: int, base: int = 0
) -> tuple[list[FatbinEntry], int]:
    """Parse the container at ``offset``; return its entries and the offset just past it.

    Raises FatbinError if the container does not lie within ``limit`` or its entries do not tile it.
    """
    head = read_at(offset, _CONTAINER.size)
    if len(head) < _CONTAINER.size:
        raise FatbinError(f"fat binary container at offset {offset:#x} is truncated")
    magic, version, hsize, size = _CONTAINER.unpack(head)
    if magic != CONTAINER_MAGIC:
        raise FatbinError(f"no fat binary container magic at offset {offset:#x}")
    if version != 1 or hsize < _CONTAINER.size or hsize > 256:
        raise FatbinError(f"fat binary container at {offset:#x} has unknown version {version} / header {hsize}")
    end = offset + hsize + size
    if end > limit:
        raise FatbinError(
            f"fat binary container at {offset:#x} claims {size} bytes but only {limit - offset - hsize} remain"
        )
    entries: list[FatbinEntry] = []
    pos = offset + hsize
    while pos < end:
        raw = read_at(pos, _ENTRY.size)
        if len(raw) < _ENTRY.size:
            raise FatbinError(f"fat binary entry at {pos:#x} is truncated")
        (kind, _ever, ehsize, psize, csize, _opt, minor, major, sm, idoff, idlen, flags, _res, usize) = _ENTRY.unpack(
            raw
        )
        if not _MIN_ENTRY_HEADER <= ehsize <= _MAX_ENTRY_HEADER or pos + ehsize + psize > end:
            raise FatbinError(
                f"fat binary entry at {pos:#x} (header {ehsize}, payload {psize}) does not fit its container"
            )
        if not 10 <= sm <= 999:  # ArchEntry names have two or three digits; sm_4266763536 is corruption
            raise FatbinError(f"fat binary entry at {pos:#x} claims architecture sm_{sm}, "
                              "which is not a GPU architecture")
        ident = None
        if idoff and idlen and idoff + idlen <= ehsize + psize and idlen <= 4096:
            ident = read_at(pos + idoff, idlen).split(b"\0", 1)[0].decode("utf-8", "replace") or None
        compression: str | None = None
        if flags & FLAG_ZSTD:
            compression = "zstd"
        elif flags & FLAG_LZ4:
            compression = "lz4"
        elif csize:
            compression = "unknown"
        suffix: Literal["", "a", "f"] = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
        entries.append(
            FatbinEntry(
                kind=_KINDS.get(kind, "unknown"),
                sm=sm,
                suffix=suffix,
                compressed=compression is not None,
                compression=compression,
                section=section,
                container=index,
                offset=base + pos,
                header_size=ehsize,
                payload_size=psize,
                compressed_size=csize,
                uncompressed_size=usize,
                flags=flags,
                code_version=(major, minor),
                identifier=ident,
            )
        )
        pos += ehsize + psize
    if pos != end:
        raise FatbinError(f"fat binary entries overrun their container at {offset:#x}")
    return entries, end


def _parse_region(read_at: ReadAt, start: int, end: int, section: str, first_index: int) -> list[FatbinEntry]:
    """Parse the containers lying back to back in ``[start, end)`` (a fat-binary section)."""
    out: list[FatbinEntry] = []
    pos = start
    index = first_index
    while pos + _CONTAINER.size <= end:
        head = read_at(pos, 8)
        if len(head) < 8:
            raise FatbinError(f"section {section} is truncated at offset {pos:#x}")
        if head[:4] != _MAGIC_BYTES:
            if head == b"\0" * 8:  # alignment padding between containers
                pos += 8
                continue
            raise FatbinError(f"section {section} holds no fat binary container at offset {pos:#x}")
        entries, pos = _parse_container(read_at, pos, end, section, index)
        out.extend(entries)
        index += 1
        pos = (pos + 7) & ~7
    return out


def scan_containers(
    read_at: ReadAt, size: int, first_index: int = 0, *, section: str = "", base: int = 0
) -> list[FatbinEntry]:
    """Find fat-binary containers anywhere in ``[0, size)`` by their magic, keeping only valid ones.

    Used when section headers are missing. A hit counts only if its container parses completely
    (sane header, only known entry kinds, entry headers tiling it exactly); scanning resumes after
    each valid container. Reads the file once in large chunks. ``read_at`` may be a window into a
    bigger file: ``base`` is then added to the entries' offsets and ``section`` names their section.
    """
    out: list[FatbinEntry] = []
    index = first_index
    pos = 0  # start of the current chunk
    resume = 0  # no hit before this offset counts (inside a container already parsed)
    while pos < size:
        chunk = read_at(pos, min(_SCAN_CHUNK, size - pos))
        if not chunk:
            break
        view = memoryview(chunk)
        lo, hi = pos, pos + len(chunk)

        def cached(off: int, n: int, lo: int = lo, hi: int = hi, view: memoryview = view) -> bytes:
            # headers inside the chunk in hand are read from it, the rest from the file
            return bytes(view[off - lo : off - lo + n]) if lo <= off and off + n <= hi else read_at(off, n)

        hit = chunk.find(_MAGIC_BYTES, max(resume - pos, 0))
        while hit >= 0:
            at = pos + hit
            try:
                entries, end = _parse_container(cached, at, size, section, index, base)
            except FatbinError:
                entries, end = [], at
            if entries and all(e.kind != "unknown" for e in entries):
                out.extend(entries)
                index += 1
                resume = end
                if end - pos >= len(chunk):
                    break
                hit = chunk.find(_MAGIC_BYTES, end - pos)
            else:
                hit = chunk.find(_MAGIC_BYTES, hit + 1)
        if len(chunk) < _SCAN_CHUNK:
            break
        # overlap by 3 bytes so that a magic split across two chunks is found
        pos = max(pos + len(chunk) - 3, resume)
    return out


def _elf_header(head: bytes) -> tuple[int, int]:
    """Return (e_type, e_machine) of an ELF header, or raise NotElfError."""
    if len(head) < 20 or head[:4] != ELF_MAGIC:
        raise NotElfError("not an ELF file (no \\x7fELF magic)")
    endian = "<" if head[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(endian + "HH", head, 16)
    return e_type, e_machine


@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    offset: int
    size: int


SHT_NOBITS = 8


def elf_sections(read_at: ReadAt, size: int) -> list[ElfSection] | None:
    """The section table of an ELF file, or None when its section headers are stripped.

    A minimal reader of the ELF header and section header table (ELF32/ELF64, either byte order,
    extended section numbering), written here because this module must run with the stdlib alone
    and because pyelftools' construct-based parsing costs about 12 ms per file, which adds up to
    many seconds over the hundreds of ELF files of an image. The tests check it against pyelftools.
    """
    head = read_at(0, 64)
    if len(head) < 6 or head[:4] != ELF_MAGIC:
        raise NotElfError("not an ELF file (no \\x7fELF magic)")
    cls, data = head[4], head[5]
    if len(head) < (64 if cls == 2 else 52):
        raise FatbinError(f"ELF header is truncated ({len(head)} bytes): the file is cut short")
    if cls not in (1, 2) or data not in (1, 2):
        raise FatbinError(f"unknown ELF class {cls} or byte order {data}")
    e = "<" if data == 1 else ">"
    if cls == 2:
        (shoff,) = struct.unpack_from(e + "Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", head, 0x3A)
        shdr = struct.Struct(e + "IIQQQQIIQQ")  # name type flags addr offset size link info align entsize
        min_entsize = 64
    else:
        (shoff,) = struct.unpack_from(e + "I", head, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", head, 0x2E)
        shdr = struct.Struct(e + "IIIIIIIIII")
        min_entsize = 40
    if shoff == 0:
        return None
    if shentsize < min_entsize:
        raise FatbinError(f"ELF section header size {shentsize} is too small")

    def header(i: int) -> tuple[int, ...]:
        raw = read_at(shoff + i * shentsize, shdr.size)
        if len(raw) < shdr.size:
            raise FatbinError(
                f"ELF section header {i} lies past the end of the file ({size} bytes): the file is truncated"
            )
        return shdr.unpack(raw)

    first = header(0)
    if shnum == 0:  # extended numbering: the count is in section 0's sh_size
        shnum = first[5]
    if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is in section 0's sh_link
        shstrndx = first[6]
    if shnum == 0:
        return None
    if shoff + shnum * shentsize > size:
        raise FatbinError(
            f"ELF section headers end at {shoff + shnum * shentsize} but the file has only {size} bytes (truncated)"
        )
    if shentsize == shdr.size:
        table = read_at(shoff, shnum * shentsize)
        rows = list(shdr.iter_unpack(table))
    else:
        rows = [header(i) for i in range(shnum)]
    if not 0 < shstrndx < shnum:
        names = b""
    else:
        st = rows[shstrndx]
        if st[4] + st[5] > size:
            raise FatbinError("ELF section name table lies past the end of the file (truncated)")
        names = read_at(st[4], st[5])
    out: list[ElfSection] = []
    for row in rows:
        start = row[0]
        stop = names.find(b"\0", start)
        name = names[start : stop if stop >= 0 else len(names)].decode("latin-1") if start < len(names) else ""
        out.append(ElfSection(name, row[1], row[4], row[5]))
    return out


class Opened:
    """A source turned into ``read_at(offset, n)`` and ``size``; ``close()`` closes what it opened."""

    def __init__(self, source: Source) -> None:
        self._close: IO[bytes] | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            self.size = len(data)
            self.read_at: ReadAt = lambda off, n: data[off : off + n]
            return
        if isinstance(source, (str, os.PathLike)):
            f = open(source, "rb")  # noqa: SIM115 - closed in close()
            self._close = f
            fd = f.fileno()
            self.size = os.fstat(fd).st_size
            size = self.size
            # offsets come from the file itself: one past the end (or beyond a C long) reads nothing
            self.read_at = lambda off, n: os.pread(fd, n, off) if 0 <= off < size and n > 0 else b""
            return
        f2 = source
        seekable = getattr(f2, "seekable", None)  # SpooledTemporaryFile has none before Python 3.11
        if not (seekable() if callable(seekable) else hasattr(f2, "seek")):
            data = f2.read()
            self.size = len(data)
            self.read_at = lambda off, n: data[off : off + n]
            return
        self.size = f2.seek(0, io.SEEK_END)
        pread = getattr(f2, "pread", None)  # random-access views offer pread(offset, size)
        if callable(pread):
            self.read_at = pread
            return

        def read_at(off: int, n: int) -> bytes:
            if not 0 <= off < self.size or n <= 0:
                return b""
            f2.seek(off)
            return f2.read(n)

        self.read_at = read_at

    def close(self) -> None:
        if self._close is not None:
            self._close.close()


def read_fatbins(source: Source, *, all_sections: bool = False) -> FatbinListing:
    """List the device-code entries of an ELF file (path, bytes, or seekable binary file object).

    Entries come in cuobjdump's order: ``.nv_fatbin`` (or ``__nv_relfatbin`` when the file has no
    ``.nv_fatbin``); with ``all_sections`` both, like ``cuobjdump -all``. Raises NotElfError for a
    file that is not ELF and FatbinError for a corrupt or truncated one.
    """
    src = Opened(source)
    try:
        e_type, machine = _elf_header(src.read_at(0, 64))
        table = elf_sections(src.read_at, src.size)
        if table is None:
            return FatbinListing(tuple(scan_containers(src.read_at, src.size)), "scan", (), e_type, machine)
        sections = [(t.name, t.offset, t.size) for t in table if t.name in FATBIN_SECTIONS and t.type != SHT_NOBITS]
        names = tuple(name for name, _, _ in sections)
        wanted: list[tuple[str, int, int]] = []
        for want in FATBIN_SECTIONS:
            wanted.extend(s for s in sections if s[0] == want)
        if not all_sections:
            first = ".nv_fatbin" if ".nv_fatbin" in names else "__nv_relfatbin"
            wanted = [s for s in wanted if s[0] == first]
        entries: list[FatbinEntry] = []
        index = 0
        for name, off, size in wanted:
            if off + size > src.size:
                raise FatbinError(
                    f"section {name} ends at {off + size} but the file has only {src.size} bytes (truncated)"
                )
            got = _parse_region(src.read_at, off, off + size, name, index)
            if got:
                index = got[-1].container + 1
            entries.extend(got)
        return FatbinListing(tuple(entries), "sections", names, e_type, machine)
    finally:
        src.close()


#: sections that never hold embedded fat binaries (code, symbols, unwind and debug data)
_NOT_DATA = (".text", ".plt", ".init", ".fini", ".dynsym", ".dynstr", ".symtab", ".strtab", ".shstrtab",
             ".eh_frame", ".eh_frame_hdr", ".gcc_except_table", ".dynamic", ".got", ".got.plt", ".interp",
             ".nvFatBinSegment", "__nv_module_id")  # fmt: skip
_NOT_DATA_PREFIX = (".rela", ".rel.", ".debug", ".gnu", ".note", ".zdebug")


def read_embedded(source: Source) -> tuple[FatbinEntry, ...]:
    """Fat binaries a library keeps in its own data sections and loads itself, outside ``.nv_fatbin``.

    cuFFT ships most of its kernels this way (in ``.ldata``), cuBLAS some (in ``.cask_resource``);
    cuobjdump does not list them. Each data section is scanned for validated containers; entries
    carry the section's name. Returns nothing for a file without section headers (a scan of a
    stripped file already includes everything). This reads whole sections, so call it only when
    the regular listing leaves a question open.
    """
    src = Opened(source)
    try:
        _elf_header(src.read_at(0, 64))
        table = elf_sections(src.read_at, src.size)
        if table is None:
            return ()
        out: list[FatbinEntry] = []
        index = 0
        for sec in table:
            if (
                sec.type == SHT_NOBITS
                or sec.size < 80
                or sec.name in FATBIN_SECTIONS
                or sec.name in _NOT_DATA
                or sec.name.startswith(_NOT_DATA_PREFIX)
                or sec.offset + sec.size > src.size
            ):
                continue
            base, size = sec.offset, sec.size

            def read_in(off: int, n: int, base: int = base, size: int = size) -> bytes:
                return src.read_at(base + off, min(n, size - off)) if off < size else b""

            found = scan_containers(read_in, size, index, section=sec.name, base=base)
            if found:
                out.extend(found)
                index = found[-1].container + 1
        return tuple(out)
    finally:
        src.close()


def list_entries(source: Source, *, all_sections: bool = False) -> list[FatbinEntry]:
    """The embedded SASS / PTX / LTO-IR entries of an ELF file, in cuobjdump's listing order."""
    return list(read_fatbins(source, all_sections=all_sections).entries)


def cuobjdump_lines(entries: list[FatbinEntry] | tuple[FatbinEntry, ...], filename: str) -> Iterator[str]:
    """Render entries exactly as ``cuobjdump --list-elf --list-ptx FILE`` prints them.

    cuobjdump numbers cubins and PTX separately and names each ``STEM.N.sm_XX.{cubin,ptx}``, where
    STEM is the file name without its last extension; an entry that carries an identifier (the
    source file, present with ``-G``) is named ``SOURCESTEM.sm_XX.{cubin,ptx}`` instead.
    """
    stem = _stem(filename)
    n_elf = n_ptx = 0
    for e in entries:
        if e.kind == "sass":
            n_elf += 1
            name = f"{_stem(e.identifier)}.{e.cuobjdump_arch}" if e.identifier else f"{stem}.{n_elf}.{e.cuobjdump_arch}"
            yield f"ELF file {n_elf:>4}: {name}.cubin"
        elif e.kind == "ptx":
            n_ptx += 1
            name = f"{_stem(e.identifier)}.{e.cuobjdump_arch}" if e.identifier else f"{stem}.{n_ptx}.{e.cuobjdump_arch}"
            yield f"PTX file {n_ptx:>4}: {name}.ptx"


def _stem(path: str) -> str:
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base else base
