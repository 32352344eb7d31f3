"""Prune the CUDA fat binaries of shared objects to the GPUs an image targets, and shrink the files.

This is our own code: no maintained library rewrites CUDA fat binaries (NVIDIA's ``nvprune``
works on object files and archives before linking, not on a linked ``.so``; ``cuobjdump`` only
reads). The container and entry layout is documented in :mod:`fatbin` (``fatbin.py`` beside this
file), which reads it; this module rewrites it.

**Stdlib-only, like fatbin.py**: the rendered Dockerfile copies this file and ``fatbin.py`` into
the build context and runs ``python3 prune.py --targets 9.0 DIR`` in the step that installs torch
or an extension, with nothing but the standard library. Do not import torchkiln (or any
third-party package) here.

What a prune does to one ELF shared object (ELF64 little-endian)
---------------------------------------------------------------
1. Every container of ``.nv_fatbin`` keeps, for each target capability X.Y: the SASS built
   exactly for X.Y (with its ``a``/``f`` variants), else the newest SASS the driver would run
   there (same major, older minor); PTX the driver can JIT for X.Y when ``ptx`` is asked for or
   when the container has no SASS for that target (so that coverage never drops); LTO-IR and
   unknown entries are kept as they are. A container with nothing for any target keeps its
   smallest entry (an empty container is not a valid fat binary). Entry headers and payloads are
   copied byte for byte; only the container's size field changes.
2. The containers are packed to the front of the section. The CUDA runtime finds a container
   only through the 24-byte wrapper records of ``.nvFatBinSegment`` (``{magic, version, data,
   filename_or_fatbins}``), whose pointers are fixed up by ``R_*_RELATIVE`` relocations: those
   relocation addends, the wrapper's stored pointer and the symbols naming a container are
   moved with it. When any other relocation points into ``.nv_fatbin`` (something we do not
   understand refers to it) the containers stay where they were and are compacted in place.
3. The file shrinks: the sections that followed ``.nv_fatbin`` in its ``PT_LOAD`` segment
   (``.eh_frame_hdr``, ``.eh_frame``, ``.gcc_except_table`` in torch's libraries) move down in
   the *file* only, into a second ``PT_LOAD`` segment at their unchanged virtual addresses, and
   everything after them (the other segments, non-alloc sections, the section header table)
   moves down by the same multiple of the segments' alignment, so that every segment keeps
   ``p_offset ≡ p_vaddr (mod p_align)``. The program header table, one entry longer, is written
   into the freed part of ``.nv_fatbin`` (inside the first half of the split segment, where the
   loader maps it). No virtual address changes. Where that is not possible (no room to move by
   a whole alignment unit, a segment straddling the cut, moves not safe, not ELF64 LE) the freed
   bytes are zeroed instead (they compress to nothing) and the report says why.

NVIDIA's own libraries (cuBLAS, cuDNN, NCCL, the CUDA runtime...; files of the ``nvidia``
packages) are never modified: their licence allows redistributing them unmodified only.
:func:`prune_tree` reports the bytes they carry for other GPUs instead.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

try:  # inside torchkiln
    from . import fatbin as _fb
except ImportError:  # shipped as two files side by side (python3 prune.py ...), also under python3 -I
    import os as _os
    import sys as _sys

    _sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
    import fatbin as _fb  # type: ignore[import-not-found, no-redef]

__all__ = [
    "FileResult",
    "PruneError",
    "is_nvidia_library",
    "parse_target",
    "prune_file",
    "prune_tree",
    "prune_wheel",
    "select",
]

FATBIN = ".nv_fatbin"
SEGMENT = ".nvFatBinSegment"
WRAPPER_MAGIC = 0x466243B1
PT_LOAD, PT_PHDR = 1, 6
SHT_RELA, SHT_SYMTAB, SHT_DYNSYM, SHT_NOBITS = 4, 2, 11, 8
SHF_ALLOC = 0x2
ET_DYN = 3
#: R_X86_64_RELATIVE, R_AARCH64_RELATIVE, R_PPC64_RELATIVE
RELATIVE_TYPES = {62: 8, 183: 1027, 21: 22}

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_RELA = struct.Struct("<QQq")
_SYM = struct.Struct("<IBBHQQ")
_CHUNK = 8 << 20

#: file names of NVIDIA's libraries, for files found outside an ``nvidia/`` package folder
_NVIDIA_NAMES = re.compile(
    r"^lib(cublas|cublasLt|cudnn\w*|nccl|cudart|cusparse|cusparseLt|cufft\w*|curand|cusolver\w*|nvrtc\w*|"
    r"nvJitLink|nvjitlink|nvshmem_\w+|cupti|nvToolsExt|nvperf\w*|cufile\w*|nvblas|npp\w*|nvjpeg|cuda|"
    r"nvidia-\w+|nvptxcompiler\w*|cudla|nvfatbin|caffe2_nvrtc_never)(\.|-|_)",
)


class PruneError(ValueError):
    """A file cannot be pruned (not ELF, corrupt, unsupported layout) or a target is not understood."""


# --------------------------------------------------------------------------------------- selection


def parse_target(text: str) -> tuple[int, int]:
    """``9.0``, ``90``, ``sm_90``, ``sm_90a`` → (9, 0)."""
    t = text.strip().lower()
    m = re.fullmatch(r"(\d{1,2})\.(\d)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})[af]?", t)
    if m:
        n = int(m.group(1))
        return n // 10, n % 10
    raise PruneError(f"not a compute capability: {text!r} (write 9.0, sm_90 or 90)")


def runs_on(kind: str, sm: int, suffix: str, device: tuple[int, int]) -> bool:
    """The rule of ``torchkiln.arch.ArchEntry.runs_on`` (repeated here: this file is stdlib-only)."""
    cap = (sm // 10, sm % 10)
    if suffix == "a":
        return device == cap
    if kind == "ptx" and suffix == "":
        return device >= cap
    return device[0] == cap[0] and device[1] >= cap[1]


def select(entries: Sequence[_fb.FatbinEntry], targets: Iterable[tuple[int, int]], ptx: bool) -> list[bool]:
    """Which entries of one container to keep (see the module docstring, step 1)."""
    keys: set[tuple[str, int, str]] = set()
    for dev in targets:
        sass = [e for e in entries if e.kind == "sass" and runs_on("sass", e.sm, e.suffix, dev)]
        exact = [e for e in sass if (e.sm // 10, e.sm % 10) == dev]
        keys.update((e.kind, e.sm, e.suffix) for e in exact)
        if not any(e.suffix != "a" for e in exact):
            generic = [e for e in sass if e.suffix != "a"]
            if generic:
                best = max(generic, key=lambda e: (e.sm, e.suffix == "f"))
                keys.add((best.kind, best.sm, best.suffix))
        ptxs = [e for e in entries if e.kind == "ptx" and runs_on("ptx", e.sm, e.suffix, dev)]
        if ptxs and (ptx or not sass):
            best = max(ptxs, key=lambda e: (e.sm, e.suffix == ""))
            keys.add((best.kind, best.sm, best.suffix))
    keep = [e.kind not in ("sass", "ptx") or (e.kind, e.sm, e.suffix) in keys for e in entries]
    if entries and not any(keep):
        smallest = min(range(len(entries)), key=lambda i: entries[i].header_size + entries[i].payload_size)
        keep[smallest] = True
    return keep


def is_nvidia_library(path: str) -> bool:
    """True for a file of NVIDIA's packages (``site-packages/nvidia/...``) or named like one of their libraries."""
    parts = path.replace("\\", "/").split("/")
    if "nvidia" in parts[:-1]:
        return True
    return bool(_NVIDIA_NAMES.match(parts[-1]))


# ------------------------------------------------------------------------------------------ results


@dataclass
class FileResult:
    path: str
    #: pruned (file shrank), zeroed (same size, freed bytes zeroed), unchanged, nvidia (not modified:
    #: NVIDIA's), skipped (not prunable; see note), no-device-code
    status: str
    size_before: int = 0
    size_after: int = 0
    fatbin_before: int = 0
    fatbin_after: int = 0
    entries_before: int = 0
    entries_after: int = 0
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    #: device code for other GPUs (bytes of the entries a prune would drop), reported for NVIDIA's libraries
    foreign_bytes: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# ------------------------------------------------------------------------------------------ the ELF


@dataclass
class _Container:
    start: int  # file offset
    hsize: int
    end: int  # file offset just past its entries
    entries: list[_fb.FatbinEntry]


def _containers(read_at: _fb.ReadAt, start: int, end: int) -> list[_Container]:
    out: list[_Container] = []
    pos = start
    while pos + 16 <= end:
        head = read_at(pos, 16)
        if head[:8] == b"\0" * 8:
            pos += 8
            continue
        entries, stop = _fb._parse_container(read_at, pos, end, FATBIN, len(out))
        out.append(_Container(pos, struct.unpack_from("<H", head, 6)[0], stop, entries))
        pos = (stop + 7) & ~7
    return out


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _Patches:
    """Byte replacements at old file offsets, applied while the file is copied."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes]] = []

    def add(self, offset: int, data: bytes) -> None:
        self.items.append((offset, data))

    def apply(self, start: int, chunk: bytearray) -> None:
        end = start + len(chunk)
        for off, data in self.items:
            if off < end and off + len(data) > start:
                lo = max(off, start)
                hi = min(off + len(data), end)
                chunk[lo - start : hi - start] = data[lo - off : hi - off]


def _copy(src: int, dst: object, start: int, end: int, patches: _Patches) -> None:
    pos = start
    while pos < end:
        n = min(_CHUNK, end - pos)
        chunk = bytearray(os.pread(src, n, pos))
        if len(chunk) != n:
            raise PruneError(f"file shrank while being read (at {pos})")
        patches.apply(pos, chunk)
        dst.write(chunk)  # type: ignore[attr-defined]
        pos += n


def _describe(entries: Iterable[_fb.FatbinEntry]) -> list[str]:
    return sorted({e.arch for e in entries}, key=lambda a: (int(re.sub(r"\D", "", a) or 0), a))


def prune_file(path: str, targets: Sequence[tuple[int, int]], *, ptx: bool = False, dry_run: bool = False,
               shrink: bool = True) -> FileResult:
    """Prune one ELF file in place (atomically: a new file replaces it). See the module docstring."""
    if not targets:
        raise PruneError("no targets: give at least one compute capability (e.g. 9.0)")
    size = os.path.getsize(path)
    res = FileResult(path, "unchanged", size, size)
    with open(path, "rb") as f:
        fd = f.fileno()

        def read_at(off: int, n: int) -> bytes:
            return os.pread(fd, n, off) if 0 <= off < size and n > 0 else b""

        head = read_at(0, 64)
        if head[:4] != _fb.ELF_MAGIC:
            raise _fb.NotElfError(f"{path}: not an ELF file")
        if head[4] != 2 or head[5] != 1:
            res.status, res.note = "skipped", "only 64-bit little-endian ELF files are rewritten"
            return res
        (_ident, e_type, e_machine, _ver, _entry, e_phoff, e_shoff, _flags, _ehsize, e_phentsize, e_phnum,
         e_shentsize, e_shnum, e_shstrndx) = _EHDR.unpack(head)
        if e_shoff == 0 or e_shnum == 0:
            res.status, res.note = "skipped", "no section headers (stripped): nothing can be located safely"
            return res
        if e_shentsize != _SHDR.size or e_phentsize != _PHDR.size:
            raise PruneError(f"{path}: unusual ELF header sizes")
        shdrs = [list(_SHDR.unpack(read_at(e_shoff + i * _SHDR.size, _SHDR.size))) for i in range(e_shnum)]
        if e_shoff + e_shnum * _SHDR.size > size:
            raise PruneError(f"{path}: section headers lie past the end of the file (truncated)")
        strtab = shdrs[e_shstrndx] if 0 < e_shstrndx < e_shnum else None
        names_raw = read_at(strtab[4], strtab[5]) if strtab else b""

        def name(sh: list[int]) -> str:
            s = sh[0]
            return names_raw[s : names_raw.find(b"\0", s)].decode("latin-1") if s < len(names_raw) else ""

        names = [name(sh) for sh in shdrs]
        if FATBIN not in names:
            res.status = "no-device-code"
            return res
        fi = names.index(FATBIN)
        fsh = shdrs[fi]
        f_off, f_size, f_addr = fsh[4], fsh[5], fsh[3]
        if fsh[1] == SHT_NOBITS or f_off + f_size > size:
            raise PruneError(f"{path}: {FATBIN} lies past the end of the file (truncated)")
        try:
            conts = _containers(read_at, f_off, f_off + f_size)
        except _fb.FatbinError as e:
            raise PruneError(f"{path}: {e}") from None
        all_entries = [e for c in conts for e in c.entries]
        res.entries_before = len(all_entries)
        res.fatbin_before = sum(c.end - c.start for c in conts)
        keeps = [select(c.entries, targets, ptx) for c in conts]
        kept = [e for c, k in zip(conts, keeps, strict=True) for e, x in zip(c.entries, k, strict=True) if x]
        dropped = [e for c, k in zip(conts, keeps, strict=True) for e, x in zip(c.entries, k, strict=True) if not x]
        res.entries_after = len(kept)
        res.kept, res.dropped = _describe(kept), _describe(dropped)
        res.foreign_bytes = sum(e.header_size + e.payload_size for e in dropped)
        res.fatbin_after = res.fatbin_before - res.foreign_bytes
        if not dropped:
            return res

        # new container bytes
        new_conts: list[bytes] = []
        for c, k in zip(conts, keeps, strict=True):
            body = b"".join(read_at(e.offset, e.header_size + e.payload_size)
                            for e, x in zip(c.entries, k, strict=True) if x)
            hdr = bytearray(read_at(c.start, c.hsize))
            struct.pack_into("<Q", hdr, 8, len(body))
            new_conts.append(bytes(hdr) + body)

        # where every container goes: packed to the front when its references can be moved
        phdrs = [list(_PHDR.unpack(read_at(e_phoff + i * _PHDR.size, _PHDR.size))) for i in range(e_phnum)]
        moves_ok, why = _moves_safe(read_at, shdrs, names, fsh, conts, e_type, e_machine)
        patches = _Patches()
        if moves_ok:
            starts, pos = [], f_off
            for blob in new_conts:
                pos = _align(pos, 8)
                starts.append(pos)
                pos += len(blob)
            packed_end = pos
            _move_references(read_at, shdrs, names, fsh, conts, starts, e_machine, fi, patches)
        else:
            starts = [c.start for c in conts]
            packed_end = conts[-1].start + len(new_conts[-1]) if conts else f_off

        planned = _shrink_plan(phdrs, shdrs, fi, f_off, f_size, f_addr, packed_end, e_phoff, e_phnum, e_shoff, size)
        plan: dict[str, int] | None = None
        if not shrink:
            why = "shrinking was turned off"
        elif isinstance(planned, str):
            why = planned
        elif moves_ok:
            plan = planned
        if plan is None:
            res.status = "zeroed"
            res.note = f"freed bytes zeroed, file size unchanged: {why}"
            res.size_after = size
        else:
            res.status = "pruned"
            res.size_after = size - plan["delta"]
        if dry_run:
            return res

        # assemble the new .nv_fatbin region
        region_end = plan["new_end"] if plan else f_off + f_size
        region = bytearray(region_end - f_off)
        for st, blob in zip(starts, new_conts, strict=True):
            region[st - f_off : st - f_off + len(blob)] = blob
        if plan:
            _plan_headers(plan, phdrs, shdrs, fi, e_phoff, e_phnum, e_shoff, f_off, region, patches, packed_end)
        tmp = _write(path, fd, size, f_off, f_off + f_size, region, plan, patches)
    os.replace(tmp, path)
    return res


def _moves_safe(read_at: _fb.ReadAt, shdrs: list[list[int]], names: list[str], fsh: list[int],
                conts: list[_Container], e_type: int, e_machine: int) -> tuple[bool, str]:
    """Whether every reference to a container is one we know how to move (see the docstring, step 2)."""
    if e_type != ET_DYN:
        return False, f"not a shared object (ELF type {e_type}): containers compacted in place"
    rel_type = RELATIVE_TYPES.get(e_machine)
    if rel_type is None:
        return False, f"unknown machine {e_machine}: containers compacted in place"
    if SEGMENT not in names:
        return False, f"no {SEGMENT} section: containers compacted in place"
    seg = shdrs[names.index(SEGMENT)]
    lo, hi = fsh[3], fsh[3] + fsh[5]
    starts = {fsh[3] + (c.start - fsh[4]) for c in conts}
    for sh in shdrs:
        if sh[1] != SHT_RELA or not sh[2] & SHF_ALLOC or sh[9] != _RELA.size:
            continue
        for r_off, r_info, addend in _RELA.iter_unpack(read_at(sh[4], sh[5] - sh[5] % _RELA.size)):
            if lo <= addend < hi:
                if (r_info & 0xFFFFFFFF) != rel_type or not seg[3] <= r_off < seg[3] + seg[5] or addend not in starts:
                    return False, f"a relocation at {r_off:#x} refers into {FATBIN}: containers compacted in place"
    return True, ""


def _move_references(read_at: _fb.ReadAt, shdrs: list[list[int]], names: list[str], fsh: list[int],
                     conts: list[_Container], starts: list[int], e_machine: int, fi: int, patches: _Patches) -> None:
    va = {fsh[3] + (c.start - fsh[4]): fsh[3] + (s - fsh[4]) for c, s in zip(conts, starts, strict=True)}
    rel_type = RELATIVE_TYPES[e_machine]
    seg = shdrs[names.index(SEGMENT)]
    data = read_at(seg[4], seg[5])
    for i in range(0, len(data) - 7, 8):
        (v,) = struct.unpack_from("<Q", data, i)
        if v in va and va[v] != v:
            patches.add(seg[4] + i, struct.pack("<Q", va[v]))
    for sh in shdrs:
        if sh[1] == SHT_RELA and sh[2] & SHF_ALLOC and sh[9] == _RELA.size:
            raw = read_at(sh[4], sh[5] - sh[5] % _RELA.size)
            for j, (_o, info, addend) in enumerate(_RELA.iter_unpack(raw)):
                if (info & 0xFFFFFFFF) == rel_type and addend in va and va[addend] != addend:
                    patches.add(sh[4] + j * _RELA.size + 16, struct.pack("<q", va[addend]))
        elif sh[1] in (SHT_SYMTAB, SHT_DYNSYM) and sh[9] == _SYM.size:
            raw = read_at(sh[4], sh[5] - sh[5] % _SYM.size)
            for j, (_n, _i, _o, shndx, value, _s) in enumerate(_SYM.iter_unpack(raw)):
                if shndx == fi and value in va and va[value] != value:
                    patches.add(sh[4] + j * _SYM.size + 8, struct.pack("<Q", va[value]))


def _shrink_plan(phdrs: list[list[int]], shdrs: list[list[int]], fi: int, f_off: int, f_size: int, f_addr: int,
                 packed_end: int, e_phoff: int, e_phnum: int, e_shoff: int, size: int) -> dict[str, int] | str:
    """How the file shrinks (docstring, step 3), or why it cannot."""
    f_end = f_off + f_size
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    seg = [p for p in loads if p[2] <= f_off and f_end <= p[2] + p[5]]
    if len(seg) != 1:
        return f"{FATBIN} is not inside exactly one PT_LOAD segment"
    s = seg[0]
    if s[5] != s[6]:
        return f"the segment holding {FATBIN} has memory beyond its file bytes"
    align = max([4096] + [p[7] for p in loads])
    for p in phdrs:
        if p is not s and p[5] and p[2] < f_end and p[2] + p[5] > f_off:
            return f"another segment (type {p[0]:#x}) overlaps {FATBIN}"
    s_end = s[2] + s[5]
    after = [sh[4] for i, sh in enumerate(shdrs) if i != fi and sh[1] and sh[4] >= f_end and sh[4] < s_end
             and sh[2] & SHF_ALLOC]
    split = bool(after)
    if split and e_phnum + 1 > 0xFFFF:
        return "too many program headers"
    new_end = _align(packed_end, 8)
    table_off = new_end
    if split:
        new_end = table_off + (e_phnum + 1) * _PHDR.size
    if split:
        src = min(after)
        next_va = s[3] + (src - s[2])
        new_end_va = s[3] + (new_end - s[2])
        if next_va // align <= (new_end_va - 1) // align:
            return "too few bytes freed to move the following sections by a whole page"
    else:
        later = [sh[4] for i, sh in enumerate(shdrs) if i != fi and sh[1] and sh[4] >= f_end]
        later += [p[2] for p in phdrs if p[2] >= f_end]
        later += [e_shoff] if e_shoff >= f_end else []
        src = min(later) if later else size
    dst = new_end + (src - new_end) % align
    delta = src - dst
    if delta <= 0:
        return "too few bytes freed to move the rest of the file by a whole page"
    for p in phdrs:  # a segment that starts before the cut must end before it (or be the one split)
        if p is not s and p[5] and p[2] < src < p[2] + p[5]:
            return f"a segment (type {p[0]:#x}) straddles the bytes that would move"
    for i, sh in enumerate(shdrs):
        if i != fi and sh[1] not in (0, SHT_NOBITS) and sh[5] and sh[4] < src < sh[4] + sh[5]:
            return "a section straddles the bytes that would move"
    if e_phoff + e_phnum * _PHDR.size > f_off and e_phoff < src:
        return "the program header table lies in the part of the file that is rewritten"
    return {"seg": loads.index(s), "split": int(split), "src": src, "dst": dst, "delta": delta, "new_end": new_end,
            "table_off": table_off, "align": align}


def _plan_headers(plan: dict[str, int], phdrs: list[list[int]], shdrs: list[list[int]], fi: int, e_phoff: int,
                  e_phnum: int, e_shoff: int, f_off: int, region: bytearray, patches: _Patches,
                  packed_end: int) -> None:
    src, delta = plan["src"], plan["delta"]
    s = [p for p in phdrs if p[0] == PT_LOAD][plan["seg"]]
    out: list[list[int]] = []
    for p in phdrs:
        if p is s:
            a = list(p)
            if plan["split"]:
                b = list(p)
                a[5] = a[6] = plan["new_end"] - p[2]
                b[2] = src - delta
                b[3] = b[4] = p[3] + (src - p[2])
                b[5] = p[5] - (src - p[2])
                b[6] = p[6] - (src - p[2])
                out += [a, b]
            else:
                a[5] = a[6] = plan["new_end"] - p[2]
                out.append(a)
            continue
        q = list(p)
        if q[2] >= src:
            q[2] -= delta
        out.append(q)
    if plan["split"]:
        t = plan["table_off"]
        for q in out:
            if q[0] == PT_PHDR:
                q[2], q[3], q[4] = t, s[3] + (t - s[2]), s[3] + (t - s[2])
                q[5] = q[6] = len(out) * _PHDR.size
        table = b"".join(_PHDR.pack(*q) for q in out)
        region[t - f_off : t - f_off + len(table)] = table
        patches.add(e_phoff, b"\0" * (e_phnum * _PHDR.size))  # the old table: no longer read
        patches.add(0x20, struct.pack("<Q", t))
        patches.add(0x38, struct.pack("<H", len(out)))
    else:
        patches.add(e_phoff, b"".join(_PHDR.pack(*q) for q in out))
    for i, sh in enumerate(shdrs):
        off = sh[4]
        if i == fi:
            patches.add(e_shoff + i * _SHDR.size + 32, struct.pack("<Q", packed_end - f_off))
        elif sh[1] and off >= src:
            patches.add(e_shoff + i * _SHDR.size + 24, struct.pack("<Q", off - delta))
    if e_shoff >= src:
        patches.add(0x28, struct.pack("<Q", e_shoff - delta))


def _write(path: str, fd: int, size: int, f_off: int, f_end: int, region: bytearray, plan: dict[str, int] | None,
           patches: _Patches) -> str:
    d = os.path.dirname(os.path.abspath(path))
    st = os.stat(path)
    tfd, tmp = tempfile.mkstemp(prefix=".kiln-prune-", dir=d)
    try:
        with os.fdopen(tfd, "wb") as out:
            _copy(fd, out, 0, f_off, patches)
            out.write(region)
            if plan is None:
                _copy(fd, out, f_end, size, patches)
            else:
                out.write(b"\0" * (plan["dst"] - plan["new_end"]))
                _copy(fd, out, plan["src"], size, patches)
        os.chmod(tmp, st.st_mode & 0o7777)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


# ---------------------------------------------------------------------------------- trees and wheels


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == _fb.ELF_MAGIC
    except OSError:
        return False


def _one(path: str, shown: str, targets: Sequence[tuple[int, int]], ptx: bool, dry_run: bool) -> FileResult:
    if is_nvidia_library(shown):
        r = prune_file(path, targets, ptx=ptx, dry_run=True)
        r.status = "nvidia" if r.entries_before else "no-device-code"
        r.size_after, r.fatbin_after, r.entries_after = r.size_before, r.fatbin_before, r.entries_before
        r.note = "NVIDIA's library: never modified (its licence allows redistributing it unmodified only)"
        r.path = shown
        return r
    try:
        r = prune_file(path, targets, ptx=ptx, dry_run=dry_run)
    except _fb.NotElfError:
        raise
    except (PruneError, _fb.FatbinError) as e:
        r = FileResult(shown, "skipped", os.path.getsize(path), os.path.getsize(path), note=str(e))
    r.path = shown
    return r


def _walk(root: str) -> Iterator[str]:
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(d, n)
            if not os.path.islink(p) and os.path.isfile(p):
                yield p


def prune_tree(root: str, targets: Sequence[tuple[int, int]], *, ptx: bool = False,
               dry_run: bool = False) -> list[FileResult]:
    """Prune every ELF file under ``root`` (or the one file ``root``); NVIDIA's are only reported."""
    if os.path.isfile(root):
        if root.endswith(".whl"):
            return prune_wheel(root, targets, ptx=ptx, dry_run=dry_run)
        if not _is_elf(root):
            raise PruneError(f"{root}: not an ELF file, a folder or a wheel")
        out = [_one(root, root, targets, ptx, dry_run)]
    elif not os.path.isdir(root):
        raise PruneError(f"{root}: no such file or folder")
    else:
        out = []
        for p in _walk(root):
            if _is_elf(p):
                r = _one(p, p, targets, ptx, dry_run)
                if r.status != "no-device-code":
                    out.append(r)
    if not dry_run:
        update_records([r.path for r in out if r.status in ("pruned", "zeroed")])
    return out


def update_records(paths: Iterable[str]) -> int:
    """Rewrite the installed ``*.dist-info/RECORD`` lines (hash, size) of files that were pruned in place.

    A file of an installed distribution is listed, relative to its site-packages folder, in the RECORD
    of the distribution that installed it; that folder is the nearest parent holding ``*.dist-info``
    folders. Returns how many lines changed. Files that no RECORD lists are left alone.
    """
    by_record: dict[str, dict[str, str]] = {}
    for path in paths:
        path = os.path.abspath(path)
        d = os.path.dirname(path)
        while d != os.path.dirname(d):
            infos = [n for n in os.listdir(d) if n.endswith(".dist-info")] if os.path.isdir(d) else []
            if infos:
                rel = os.path.relpath(path, d)
                for info in sorted(infos):
                    rec = os.path.join(d, info, "RECORD")
                    if os.path.isfile(rec):
                        by_record.setdefault(rec, {})[rel] = path
                break
            d = os.path.dirname(d)
    changed = 0
    for rec, files in by_record.items():
        with open(rec, encoding="utf-8") as f:
            lines = f.read().splitlines()
        new = []
        for line in lines:
            name = line.split(",", 1)[0]
            if name in files:
                line = f"{name},{_record_hash(files[name])},{os.path.getsize(files[name])}"
                changed += 1
            new.append(line)
        if new != lines:
            st = os.stat(rec)
            tmp = rec + ".kiln-prune"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("\n".join(new) + "\n")
            os.chmod(tmp, st.st_mode & 0o7777)
            os.replace(tmp, rec)
    return changed


def _record_hash(data_path: str) -> str:
    h = hashlib.sha256()
    with open(data_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def prune_wheel(wheel: str, targets: Sequence[tuple[int, int]], *, ptx: bool = False,
                dry_run: bool = False) -> list[FileResult]:
    """Prune the shared objects of a wheel and rewrite its RECORD (hashes and sizes); the wheel is replaced."""
    results: list[FileResult] = []
    with tempfile.TemporaryDirectory(prefix="kiln-prune-", dir=os.path.dirname(os.path.abspath(wheel))) as tmp:
        with zipfile.ZipFile(wheel) as zin:
            infos = zin.infolist()
            changed: dict[str, str] = {}
            for info in infos:
                if info.is_dir() or not re.search(r"\.so(\.[\d.]+)?$", info.filename):
                    continue
                with zin.open(info) as f:
                    if f.read(4) != _fb.ELF_MAGIC:
                        continue
                dest = os.path.join(tmp, str(len(changed)))
                with zin.open(info) as f, open(dest, "wb") as g:
                    shutil.copyfileobj(f, g, 1 << 20)
                r = _one(dest, info.filename, targets, ptx, dry_run)
                if r.status != "no-device-code":
                    results.append(r)
                if r.status in ("pruned", "zeroed") and not dry_run:
                    changed[info.filename] = dest
            if dry_run or not changed:
                return results
            record = next((i.filename for i in infos if re.fullmatch(r"[^/]+\.dist-info/RECORD", i.filename)), None)
            if record is None:
                raise PruneError(f"{wheel}: no .dist-info/RECORD: not a wheel")
            lines = zin.read(record).decode().splitlines()
            new_lines = []
            for line in lines:
                name_ = line.split(",", 1)[0]
                if name_ in changed:
                    new_lines.append(f"{name_},{_record_hash(changed[name_])},{os.path.getsize(changed[name_])}")
                else:
                    new_lines.append(line)
            fd, out_path = tempfile.mkstemp(prefix=".kiln-prune-", suffix=".whl", dir=os.path.dirname(
                os.path.abspath(wheel)))
            os.close(fd)
            try:
                with zipfile.ZipFile(out_path, "w") as zout:
                    for info in infos:
                        if info.filename in changed:
                            big = os.path.getsize(changed[info.filename]) > zipfile.ZIP64_LIMIT
                            with open(changed[info.filename], "rb") as f, zout.open(info, "w", force_zip64=big) as g:
                                shutil.copyfileobj(f, g, 1 << 20)
                        elif info.filename == record:
                            zout.writestr(info, "\n".join(new_lines) + "\n")
                        else:
                            big = info.file_size > zipfile.ZIP64_LIMIT
                            with zin.open(info) as f, zout.open(info, "w", force_zip64=big) as g:
                                shutil.copyfileobj(f, g, 1 << 20)
            except BaseException:
                os.unlink(out_path)
                raise
    os.chmod(out_path, os.stat(wheel).st_mode & 0o7777)
    os.replace(out_path, wheel)
    return results


# ------------------------------------------------------------------------------------ command line


def summary(results: Sequence[FileResult]) -> dict[str, int]:
    mine = [r for r in results if r.status in ("pruned", "zeroed", "unchanged")]
    nv = [r for r in results if r.status == "nvidia"]
    return {
        "files": len(mine),
        "bytes_before": sum(r.size_before for r in mine),
        "bytes_after": sum(r.size_after for r in mine),
        "fatbin_before": sum(r.fatbin_before for r in mine),
        "fatbin_after": sum(r.fatbin_after for r in mine),
        "nvidia_files": len(nv),
        "nvidia_foreign_bytes": sum(r.foreign_bytes for r in nv),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="prune.py", description=__doc__.split("\n", 1)[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--targets", required=True, help="comma-separated compute capabilities (9.0,8.6 or sm_90)")
    ap.add_argument("--ptx", action="store_true", help="also keep the newest PTX each container has for a target")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        targets = [parse_target(t) for t in a.targets.replace(" ", ",").split(",") if t]
        results = [r for p in a.paths for r in prune_tree(p, targets, ptx=a.ptx, dry_run=a.dry_run)]
    except (PruneError, _fb.FatbinError, OSError) as e:
        print(f"prune: {e}", file=sys.stderr)
        return 7
    s = summary(results)
    if a.json:
        print(json.dumps({"summary": s, "files": [r.to_dict() for r in results]}, indent=2))
    else:
        for r in results:
            note = f"  ({r.note})" if r.note else ""
            print(f"{r.status:9} {r.size_before:>12} -> {r.size_after:>12}  {r.path}{note}")
        print(f"kiln prune: {s['files']} files {s['bytes_before']} -> {s['bytes_after']} bytes; NVIDIA's "
              f"{s['nvidia_files']} files carry {s['nvidia_foreign_bytes']} bytes for other GPUs (not modified)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
