"""Does a fat binary hold any kernels at all? Decide before calling a binary "no kernel image".

nvcc puts a device-link module into every shared library it links (the first ``.nv_fatbin``
container: registration code, no kernels), and libraries such as cuFFTW carry nothing else. Such
a module is never launched, so lacking an image for a GPU is harmless. A container has kernels when
its cubin has ``.text.<kernel>`` sections (or its PTX an ``.entry``); every cubin of a container
comes from the same source, so one (the smallest) is enough to look at.

Payloads are usually compressed: zstd needs the ``zstandard`` module, LZ4 the ``lz4`` module;
when the one needed is missing the answer is "unknown" and callers must assume kernels are there.
"""

from __future__ import annotations

from collections.abc import Iterable

from torchkiln.inspect.fatbin import FatbinEntry, Opened, ReadAt, Source, elf_sections

#: payloads bigger than this are assumed to hold kernels without decompressing them
_STUB_LIMIT = 1 << 20


def _payload(read_at: ReadAt, e: FatbinEntry) -> bytes | None:
    raw = read_at(e.offset + e.header_size, e.compressed_size if e.compressed else e.payload_size)
    if not e.compressed:
        return raw
    try:
        if e.compression == "zstd":
            import zstandard

            return bytes(zstandard.ZstdDecompressor().decompress(raw, max_output_size=e.uncompressed_size))
        if e.compression == "lz4":
            import lz4.block  # type: ignore[import-not-found, import-untyped, unused-ignore]

            data: bytes = lz4.block.decompress(raw, uncompressed_size=e.uncompressed_size)
            return data
    except ImportError:
        return None
    except Exception:  # noqa: BLE001 - a damaged payload: unknown, never fatal
        return None
    return None


def entry_has_kernels(read_at: ReadAt, e: FatbinEntry) -> bool | None:
    """True / False for a cubin or PTX entry; None when it cannot be told (compression module missing)."""
    size = e.uncompressed_size if e.compressed else e.payload_size
    if size > _STUB_LIMIT:
        return True
    data = _payload(read_at, e)
    if data is None:
        return None
    if e.kind == "ptx":
        return b".entry" in data
    if e.kind == "sass":
        try:
            table = elf_sections(lambda off, n: data[off : off + n], len(data))
        except ValueError:
            return None
        return table is None or any(s.name.startswith(".text.") for s in table)
    return None


def has_kernels(source: Source, entries: Iterable[FatbinEntry]) -> bool:
    """Whether any container of ``source`` holds kernels (False only when each is known to hold none)."""
    by_container: dict[tuple[str, int], list[FatbinEntry]] = {}
    for e in entries:
        if e.kind in ("sass", "ptx"):
            by_container.setdefault((e.section, e.container), []).append(e)
    src = Opened(source)
    try:
        for group in by_container.values():
            smallest = min(group, key=lambda x: x.uncompressed_size if x.compressed else x.payload_size)
            if entry_has_kernels(src.read_at, smallest) is not False:
                return True
        return False
    finally:
        src.close()
