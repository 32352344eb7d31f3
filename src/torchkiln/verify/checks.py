"""torchkiln's GPU checks: run inside a built image (or any Python with torch) on a real GPU.

This file is copied or mounted into images and run as a script::

    python checks.py [--json] [--spec-json FILE] [--scan DIR]... [--only a,b] [--skip c]

so it imports nothing but the standard library and torch (torch lazily, so that a missing or
broken torch is itself reported). It must never import torchkiln at module level. Two stdlib-only
torchkiln modules travel beside it in every bundle (an image's ``/opt/kiln/verify``, ``kiln
verify``'s staged folder) and are loaded from there, else from the source tree around it:
``arch.py``, the one set of compatibility rules (which device code runs on which GPU), and
``fatbin.py``, the ELF and fat-binary reader. Without ``fatbin.py`` it falls back to ``cuobjdump``
when that is on PATH, and says which reader it used.

Each check returns a name, a status (pass / fail / skip with a reason), the seconds it took and
details. The order matters: the checks that read compiled architectures run before the first
kernel launch, so a binary that cannot run on a device is named before anything tries to run it.

Exit codes (the same numbers as ``torchkiln.errors.ExitCode``): 0 every check passed or was
skipped, 1 a check failed, 2 bad arguments, 8 no CUDA device is visible.

Our own code: no library runs an image's CUDA stack end to end and reports per check.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

SCHEMA = "torchkiln.verify/1"

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 8

PASS, FAIL, SKIP = "pass", "fail", "skip"

# --------------------------------------------------------------------------------------------
# Facts (each with its source)
# --------------------------------------------------------------------------------------------

#: Oldest Linux driver that runs a CUDA major release under minor-version compatibility.
#: Source: NVIDIA, "CUDA Compatibility", minor version compatibility table (11.x >= 450.80.02,
#: 12.x >= 525.60.13, 13.x >= 580). The host runner passes the knowledge base's value instead
#: (``min_driver`` in the spec JSON) when it has one.
MVC_DRIVER_FLOOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}

#: Driver shipped with each toolkit's GA release; needed to JIT-compile PTX that this toolkit
#: wrote. Source: CUDA toolkit release notes, table 3 (driver versions).
TOOLKIT_DRIVER: dict[str, str] = {
    "11.7": "515.43.04", "11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02",
    "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02",
    "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
    "13.1": "590.44.01", "13.2": "595.45.04",
}

#: Dense (no sparsity) bf16 tensor-core peak, TFLOP/s, by device name as torch reports it.
#: Source: NVIDIA product datasheets, which quote bf16 "with sparsity"; dense is half of that
#: (H100 SXM5 1979 -> 989.4, H100 PCIe 1513 -> 756.5, H100 NVL 1671 -> 835.5, H200 SXM 1979
#: -> 989.4, H200 NVL 1671 -> 835.5, A100 624 -> 312, L40S 733 -> 366.5, L4 242 -> 121,
#: A10 250 -> 125, B200 (HGX B200, per GPU) 4500 -> 2250); RTX 4090 from the NVIDIA Ada
#: architecture whitepaper, appendix table (bf16 with fp32 accumulate, dense 165.2).
#: First match wins; MIG slices are left out on purpose (their share of the peak varies).
BF16_DENSE_PEAK_TFLOPS: tuple[tuple[str, float, str], ...] = (
    (r"\bMIG\b", 0.0, "MIG slice"),
    (r"H100.*\bNVL\b", 835.5, "H100 NVL"),
    (r"H100.*PCIe", 756.5, "H100 PCIe"),
    (r"H100.*(HBM3|SXM)", 989.4, "H100 SXM"),
    (r"H200.*\bNVL\b", 835.5, "H200 NVL"),
    (r"H200", 989.4, "H200 SXM"),
    (r"GH200", 989.4, "GH200"),
    (r"A100", 312.0, "A100"),
    (r"L40S", 366.5, "L40S"),
    (r"\bL4\b", 121.0, "L4"),
    (r"\bA10\b(?!0)", 125.0, "A10"),
    (r"B200", 2250.0, "B200"),
    (r"RTX 4090", 165.2, "GeForce RTX 4090"),
)

#: Tolerances on ||out - ref|| / ||ref|| against a float64 CPU reference computed from the same
#: (already rounded) inputs. Rounding of the output alone gives about 2^-11/sqrt(3) for fp16 and
#: 2^-8/sqrt(3) for bf16; tf32 rounds the inputs to 10 mantissa bits (about 3e-4). The margins
#: leave room for reduced-precision reductions, while any real bug gives errors of order 1.
TOLERANCE: dict[str, float] = {
    "fp32": 1e-4,
    "tf32": 5e-3,
    "fp16": 5e-3,
    "bf16": 2e-2,
    "autocast_fp16": 1e-2,
    "autocast_bf16": 3e-2,
    "autocast_grad_fp16": 2e-2,
    "autocast_grad_bf16": 5e-2,
}

#: Extensions torchkiln knows a small real call for: pip name -> import name.
KNOWN_EXTENSIONS: dict[str, str] = {
    "flash-attn": "flash_attn",
    "flash-attn-3": "flash_attn_interface",
    "xformers": "xformers",
    "apex": "apex",
}


# --------------------------------------------------------------------------------------------
# The bundle's other modules: arch.py (the rules) and fatbin.py (ELF and fat binaries)
# --------------------------------------------------------------------------------------------

#: bundled module -> (its path in the source tree relative to this folder's parent, its import name)
_BUNDLED = {"arch": ("arch.py", "torchkiln.arch"), "fatbin": ("inspect/fatbin.py", "torchkiln.inspect.fatbin")}
_loaded: dict[str, Any] = {}


def load_file_module(name: str, path: Path) -> Any:
    """Load a stdlib-only module from a file (registered in sys.modules: dataclasses look it up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return mod


def bundled(name: str) -> Any | None:
    """``arch`` or ``fatbin``: beside this file, else in the source tree, else the installed torchkiln
    (None when none loads; loaded once)."""
    if name not in _loaded:
        here = Path(__file__).resolve().parent
        rel, package = _BUNDLED[name]
        mod = None
        for candidate in (here / f"{name}.py", here.parent / rel):
            if candidate.is_file():
                try:
                    mod = load_file_module(f"_kiln_{name}", candidate)
                    break
                except Exception:  # noqa: BLE001 - try the next place
                    continue
        if mod is None:
            try:
                mod = importlib.import_module(package)
            except Exception:  # noqa: BLE001
                mod = None
        _loaded[name] = mod
    return _loaded[name]


def _rules() -> Any:
    mod = bundled("arch")
    if mod is None:
        raise RuntimeError("arch.py (torchkiln's architecture rules) is neither beside checks.py nor importable")
    return mod


# --------------------------------------------------------------------------------------------
# Architectures: arch.py's rules, on the (kind, major, minor, suffix) tuples the report uses
# --------------------------------------------------------------------------------------------


class Arch(NamedTuple):
    """One piece of device code: SASS ``sm_XY[a|f]`` or PTX ``compute_XY``."""

    kind: str  # "sass" | "ptx"
    major: int
    minor: int
    suffix: str = ""  # "", "a" (arch-specific), "f" (family)

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.major * 10 + self.minor}{self.suffix}"

    @property
    def entry(self) -> Any:
        """The same entry as arch.py's ``ArchEntry``."""
        r = _rules()
        return r.ArchEntry(self.kind, r.Capability(self.major, self.minor), self.suffix)

    def runs_on(self, cap: tuple[int, int]) -> bool:
        return bool(self.entry.runs_on(_rules().Capability(*cap)))


def parse_arch(text: str) -> Arch | None:
    """``sm_90`` / ``sm_90a`` / ``compute_90`` -> Arch; anything else -> None."""
    try:
        e = _rules().ArchEntry.parse(text)
    except ValueError:
        return None
    return Arch(e.kind, e.capability.major, e.capability.minor, e.suffix)


def best_arch(cap: tuple[int, int], entries: Iterable[Arch]) -> Arch | None:
    """The entry a device of capability ``cap`` would use (arch.py's ``coverage``), or None."""
    ents = list(entries)
    chosen = _rules().coverage(_rules().Capability(*cap), [e.entry for e in ents]).entry
    return None if chosen is None else next(e for e in ents if e.entry == chosen)


def describe_coverage(cap: tuple[int, int], entry: Arch | None) -> str:
    r = _rules()
    return str(r.Coverage(r.Capability(*cap), None if entry is None else entry.entry).how)


def why_not_runnable(cap: tuple[int, int], entries: Iterable[Arch]) -> str:
    """One sentence on why none of ``entries`` runs on ``cap``."""
    ents = sorted(set(entries))
    sass = [e.name for e in ents if e.kind == "sass"]
    ptx = [e.name for e in ents if e.kind == "ptx"]
    dev = f"{cap[0]}.{cap[1]}"
    parts = []
    if sass:
        parts.append(f"SASS only for {', '.join(sass)}, none of which runs on a {dev} device")
    else:
        parts.append("no SASS")
    if ptx:
        parts.append(f"its PTX ({', '.join(ptx)}) is newer than {dev} or arch-specific, so the driver "
                     "cannot JIT it for this device")
    else:
        parts.append("no PTX the driver could JIT")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Versions and drivers
# --------------------------------------------------------------------------------------------


def version_tuple(text: str) -> tuple[int, ...]:
    """``"580.65.06"`` -> (580, 65, 6); stops at the first non-numeric part."""
    out = []
    for part in text.strip().split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group(0)))
        if m.group(0) != part:
            break
    return tuple(out)


def parse_proc_driver_version(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` (proprietary and open modules)."""
    m = re.search(r"Kernel Module\b.*?\s(\d{3,4}\.\d{1,3}(?:\.\d{1,3})?)\b", text)
    return m.group(1) if m else None


def parse_nvidia_smi_driver(text: str) -> str | None:
    """First line of ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``."""
    for line in text.splitlines():
        line = line.strip()
        if re.fullmatch(r"\d{3,4}\.\d{1,3}(?:\.\d{1,3})?", line):
            return line
    return None


def cuda_version_from_int(n: int) -> str:
    """cuDriverGetVersion's 13000 -> "13.0"."""
    return f"{n // 1000}.{(n % 1000) // 10}"


@dataclass
class DriverInfo:
    version: str | None = None  # e.g. "580.159.04"
    source: str | None = None  # where it was read
    cuda_supported: str | None = None  # newest CUDA the driver supports, from cuDriverGetVersion
    notes: list[str] = field(default_factory=list)


def read_driver_info() -> DriverInfo:
    """The driver version: nvidia-smi, else /proc/driver/nvidia/version; plus cuDriverGetVersion."""
    info = DriverInfo()
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False,
            )
            v = parse_nvidia_smi_driver(p.stdout) if p.returncode == 0 else None
            if v:
                info.version, info.source = v, "nvidia-smi"
            else:
                info.notes.append(f"nvidia-smi exited {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            info.notes.append(f"nvidia-smi failed: {e}")
    if info.version is None:
        proc = Path("/proc/driver/nvidia/version")
        try:
            v = parse_proc_driver_version(proc.read_text(errors="replace"))
            if v:
                info.version, info.source = v, str(proc)
        except OSError:
            pass
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(n)) == 0 and n.value > 0:
            info.cuda_supported = cuda_version_from_int(n.value)
            if info.version is None:
                info.source = "cuDriverGetVersion (libcuda.so.1)"
    except OSError as e:
        info.notes.append(f"libcuda.so.1 not loadable: {e}")
    return info


@dataclass
class DriverVerdict:
    status: str
    reason: str
    required: str | None


def judge_driver(runtime_cuda: str | None, info: DriverInfo, min_driver: str | None = None) -> DriverVerdict:
    """Is the driver new enough for a CUDA ``runtime_cuda`` image (minor-version compatibility)?"""
    if not runtime_cuda:
        return DriverVerdict(SKIP, "torch has no CUDA runtime (CPU build)", None)
    rt = version_tuple(runtime_cuda)
    required = min_driver or (MVC_DRIVER_FLOOR.get(rt[0]) if rt else None)
    if info.version is not None:
        if required is None:
            return DriverVerdict(
                SKIP, f"no known driver floor for CUDA {runtime_cuda}; driver {info.version} not judged", None
            )
        if version_tuple(info.version) >= version_tuple(required):
            extra = ""
            ga = TOOLKIT_DRIVER.get(".".join(str(x) for x in rt[:2]))
            if ga and version_tuple(info.version) < version_tuple(ga):
                extra = (
                    f" (older than CUDA {runtime_cuda}'s own {ga}: runs under minor-version "
                    "compatibility; PTX from this toolkit cannot be JIT-compiled)"
                )
            return DriverVerdict(
                PASS, f"driver {info.version} >= {required} needed by CUDA {runtime_cuda}{extra}", required
            )
        return DriverVerdict(
            FAIL,
            f"driver {info.version} is older than {required}, the oldest that runs CUDA {runtime_cuda}: "
            f"upgrade the host's NVIDIA driver to {required} or newer, or use an image built for an older CUDA",
            required,
        )
    if info.cuda_supported is not None:
        ok = version_tuple(info.cuda_supported)[:1] >= rt[:1]
        status = PASS if ok else FAIL
        verb = "supports" if ok else "only supports"
        return DriverVerdict(
            status,
            f"driver version unreadable; libcuda {verb} CUDA {info.cuda_supported} (image: {runtime_cuda})",
            required,
        )
    return DriverVerdict(SKIP, "no NVIDIA driver found (no nvidia-smi, /proc/driver/nvidia/version or libcuda)",
                         required)


def bf16_peak(device_name: str) -> tuple[float, str] | None:
    """(dense bf16 TFLOP/s, label) for a device name, or None when unknown (or a MIG slice)."""
    for pattern, peak, label in BF16_DENSE_PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return None if peak <= 0 else (peak, label)
    return None


def rel_error_ok(err: float, tol: float) -> bool:
    """NaN never passes."""
    return math.isfinite(err) and err <= tol


# --------------------------------------------------------------------------------------------
# ELF and fat binaries
# --------------------------------------------------------------------------------------------

FATBIN_SECTIONS = (".nv_fatbin",)


ReadAt = Callable[[int, int], bytes]


def _section_table(fatbin: Any, read_at: ReadAt, size: int) -> dict[str, tuple[int, int]] | None:
    """{name: (offset, size)} of an ELF image's sections, read by fatbin.py's ELF reader; None if it
    is not ELF, {} when its section table is stripped or damaged."""
    try:
        sections = fatbin.elf_sections(read_at, size)
    except fatbin.NotElfError:
        return None
    except (fatbin.FatbinError, struct.error):
        return {}
    out: dict[str, tuple[int, int]] = {}
    for sec in sections or ():
        if sec.type != 8 and sec.size and sec.name:  # 8 = SHT_NOBITS: no bytes in the file
            out.setdefault(sec.name, (sec.offset, sec.size))
    return out


def elf_sections(path: str) -> dict[str, tuple[int, int]] | None:
    """{name: (file offset, size)} of the sections of an ELF file, or None if it is not one (or no
    ELF reader is bundled)."""
    fatbin = bundled("fatbin")
    if fatbin is None:
        return None
    try:
        with open(path, "rb") as f:
            fd = f.fileno()
            return _section_table(fatbin, lambda off, n: os.pread(fd, n, off), os.fstat(fd).st_size)
    except OSError:
        return None


def cubin_has_kernels(cubin: bytes) -> bool | None:
    """Whether a cubin (the ELF payload of a SASS entry) defines any kernel (a ``.text.*`` section).

    nvlink's device-link output is such a cubin without kernels (nvcc puts one in every library it
    links; cuFFT's ``libcufftw.so.12`` carries only that). None when ``cubin`` is not ELF (or no ELF
    reader is bundled).
    """
    fatbin = bundled("fatbin")
    sections = None if fatbin is None else _section_table(fatbin, lambda off, n: cubin[off:off + n], len(cubin))
    if sections is None:
        return None
    return any(name.startswith(".text.") for name in sections)


def decompress_payload(payload: bytes, compression: str | None, size: int) -> bytes | None:
    """A fat-binary entry's payload uncompressed, or None when no decompressor is available.

    zstd needs Python 3.14's ``compression.zstd`` or the ``zstandard`` package, LZ4 the ``lz4``
    package; neither is required (an unknown answer is treated as "has kernels").
    """
    if compression is None:
        return payload
    try:
        if compression == "zstd":
            try:
                zstd = importlib.import_module("compression.zstd")
                return bytes(zstd.decompress(payload))
            except ImportError:
                zstandard = importlib.import_module("zstandard")
                return bytes(zstandard.ZstdDecompressor().decompress(payload, max_output_size=max(size, 1)))
        if compression == "lz4":
            block = importlib.import_module("lz4.block")
            return bytes(block.decompress(payload, uncompressed_size=size))
    except Exception:  # noqa: BLE001 - missing module or corrupt payload: unknown
        return None
    return None


def _entry_to_arch(entry: Any) -> Arch | None:
    """Adapt one entry of a fat-binary reader (``.kind`` "sass"/"ptx" and an arch) to Arch."""
    kind = str(getattr(entry, "kind", "")).lower()
    if kind in ("elf", "cubin"):
        kind = "sass"
    if kind not in ("sass", "ptx"):
        return None  # LTO-IR / NVVM: not loadable as is
    for attr in ("name", "arch_name"):
        val = getattr(entry, attr, None)
        if isinstance(val, str):
            a = parse_arch(val)
            if a is not None:
                return Arch(kind, a.major, a.minor, a.suffix)
    arch = getattr(entry, "arch", None)
    if arch is None:
        arch = getattr(entry, "sm", None)
    if arch is None:
        arch = getattr(entry, "capability", None)
    suffix = str(getattr(entry, "suffix", "") or "")
    if not suffix:
        if getattr(entry, "arch_specific", False):
            suffix = "a"
        elif getattr(entry, "family_specific", False) or getattr(entry, "family", False) is True:
            suffix = "f"
    if isinstance(arch, int):
        return Arch(kind, arch // 10, arch % 10, suffix)
    if isinstance(arch, str):
        a = parse_arch(arch) or parse_arch(f"sm_{arch.replace('.', '')}")
        if a is not None:
            return Arch(kind, a.major, a.minor, a.suffix or suffix)
        return None
    major, minor = getattr(arch, "major", None), getattr(arch, "minor", None)
    if isinstance(major, int) and isinstance(minor, int):
        return Arch(kind, major, minor, suffix)
    return None


_CUOBJDUMP_LINE = re.compile(r"(?:ELF|PTX) file\s+\d+:\s+\S*?\.((?:sm|compute)_\d{2,3}[af]?)\.(cubin|ptx)\s*$")


def parse_cuobjdump_list(text: str) -> list[Arch]:
    """Entries of ``cuobjdump --list-elf --list-ptx`` output."""
    out = []
    for line in text.splitlines():
        m = _CUOBJDUMP_LINE.search(line.strip())
        if not m:
            continue
        a = parse_arch(m.group(1).replace("compute_", "sm_"))
        if a is None:
            continue
        kind = "sass" if m.group(2) == "cubin" else "ptx"
        out.append(Arch(kind, a.major, a.minor, a.suffix))
    return out


class FatbinReader:
    """Lists the SASS/PTX entries of a binary; ``describe`` says which implementation is used.

    ``entries(path)`` reads what the CUDA runtime loads (the ``.nv_fatbin`` section);
    ``entries(path, whole_file=True)``, where the reader can, scans the whole file for fat-binary
    containers: some libraries keep most of their device code elsewhere and load it themselves
    (cuFFT 12 keeps ~24,000 containers in ``.ldata`` and one kernel-less sm_75 stub in
    ``.nv_fatbin``). ``kernel_free`` names the SASS entries known to define no kernel.
    """

    def __init__(self, describe: str, fn: Callable[[str, bool, bool], tuple[list[Arch], list[Arch]]],
                 can_scan_whole_file: bool) -> None:
        self.describe = describe
        self._fn = fn
        self.can_scan_whole_file = can_scan_whole_file

    def entries(self, path: str, whole_file: bool = False) -> list[Arch]:
        return self._fn(path, whole_file, False)[0]

    def listing(self, path: str, whole_file: bool = False) -> tuple[list[Arch], list[Arch]]:
        """(entries, the SASS entries among them known to define no kernel); slower: reads cubins."""
        return self._fn(path, whole_file, True)


def _reader_from_module(mod: Any, describe: str) -> FatbinReader | None:
    """Adapt a fatbin module. With ``scan_containers`` (torchkiln's fatbin.py) only the
    ``.nv_fatbin`` section, located by :func:`elf_sections`, is read (the whole file on request),
    and uncompressed cubins are looked into for kernels; else ``list_entries(path)``."""
    scan = getattr(mod, "scan_containers", None)
    list_entries = getattr(mod, "list_entries", None)
    if not callable(list_entries):
        return None

    def fn(path: str, whole_file: bool, inspect_kernels: bool) -> tuple[list[Arch], list[Arch]]:
        if not callable(scan):
            return [a for a in map(_entry_to_arch, list_entries(path)) if a is not None], []
        with open(path, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            start, length = 0, size
            if not whole_file:
                sections = _section_table(mod, lambda off, n: os.pread(fd, n, off), size) or {}
                if ".nv_fatbin" not in sections:
                    return [a for a in map(_entry_to_arch, list_entries(path)) if a is not None], []
                start, length = sections[".nv_fatbin"]

            def read_at(off: int, n: int) -> bytes:
                return os.pread(fd, max(0, min(n, length - off)), start + off)

            archs: list[Arch] = []
            kernel_free: list[Arch] = []
            for e in scan(read_at, length):
                a = _entry_to_arch(e)
                if a is None:
                    continue
                archs.append(a)
                if inspect_kernels and a.kind == "sass" and hasattr(e, "offset") and hasattr(e, "header_size"):
                    csize = getattr(e, "compressed_size", 0) or getattr(e, "payload_size", 0)
                    raw = read_at(e.offset + e.header_size, csize)
                    cubin = decompress_payload(raw, getattr(e, "compression", None),
                                               getattr(e, "uncompressed_size", 0))
                    if cubin is not None and cubin_has_kernels(cubin) is False:
                        kernel_free.append(a)
            return archs, kernel_free

    return FatbinReader(describe, fn, callable(scan))


def find_fatbin_reader(here: Path, notes: list[str]) -> FatbinReader | None:
    """The best available reader: our fatbin.py (beside this file, or in the source tree), else
    cuobjdump. ``notes`` receives one line per reader that was tried and not used."""
    for candidate in (here / "fatbin.py", here.parent / "inspect" / "fatbin.py"):
        if not candidate.is_file():
            notes.append(f"no {candidate}")
            continue
        try:
            mod = load_file_module("_kiln_fatbin", candidate)
            reader = _reader_from_module(mod, f"fatbin.py ({candidate})")
            if reader is not None:
                return reader
            notes.append(f"{candidate} has no list_entries()")
        except Exception as e:  # noqa: BLE001 - any failure means "not usable", said in the report
            notes.append(f"{candidate} not usable: {type(e).__name__}: {e}")
    try:
        mod = importlib.import_module("torchkiln.inspect.fatbin")
        reader = _reader_from_module(mod, "torchkiln.inspect.fatbin")
        if reader is not None:
            return reader
    except Exception as e:  # noqa: BLE001
        notes.append(f"torchkiln.inspect.fatbin not importable: {type(e).__name__}")
    exe = shutil.which("cuobjdump")
    if exe:
        def fn(path: str, whole_file: bool, inspect_kernels: bool) -> tuple[list[Arch], list[Arch]]:
            p = subprocess.run([exe, "--list-elf", "--list-ptx", path], capture_output=True, text=True,
                               timeout=300, check=False)
            return parse_cuobjdump_list(p.stdout), []
        return FatbinReader(f"cuobjdump ({exe}); fatbin.py not found", fn, False)
    notes.append("cuobjdump not on PATH")
    return None


def scan_roots(extra: Iterable[str] = ()) -> list[str]:
    """Folders to scan for compiled extensions: the import path's folders plus ``extra``."""
    roots: list[str] = []
    seen: set[str] = set()
    for entry in [*extra, *sys.path]:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == "/" or real in seen:
            continue
        seen.add(real)
        roots.append(real)
    # drop roots nested in another root (they would be walked twice)
    return [r for r in roots if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in roots)]


def iter_shared_objects(roots: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(root, path) of every ``*.so`` / ``*.so.N`` file under the roots, each file once."""
    seen: set[tuple[int, int]] = set()
    so = re.compile(r"\.so(\.\d+)*$")
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if not so.search(name):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                yield root, path


# --------------------------------------------------------------------------------------------
# Check framework
# --------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    name: str
    status: str
    reason: str
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "details": self.details,
        }


class Outcome(Exception):
    """Raised inside a check to end it with a status (used for skip and for clean failures)."""

    def __init__(self, status: str, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.details = details or {}


@dataclass
class Options:
    spec: dict[str, Any] = field(default_factory=dict)
    scan: list[str] = field(default_factory=list)
    matmul_size: int = 8192
    matmul_iters: int = 20
    nccl_bytes: int = 256 << 20
    nccl_iters: int = 20
    nccl_timeout: float = 180.0
    min_peak_fraction: float = 0.25
    only: set[str] | None = None
    skip: set[str] = field(default_factory=set)


@dataclass
class Context:
    torch: Any
    options: Options
    devices: list[dict[str, Any]] = field(default_factory=list)
    kernels_launched: bool = False
    #: where the numerics checks run; "cuda" in real use ("cpu" lets the unit tests run the same code)
    device: str = "cuda"
    here: Path = field(default_factory=lambda: Path(__file__).resolve().parent)

    def caps(self) -> list[tuple[int, int]]:
        return [(d["capability_major"], d["capability_minor"]) for d in self.devices]


CheckFn = Callable[[Context], tuple[str, str, dict[str, Any]]]


@dataclass(frozen=True)
class CheckDef:
    name: str
    fn: CheckFn
    launches_kernels: bool
    title: str


def _run_check(ctx: Context, check: CheckDef) -> CheckResult:
    t0 = time.perf_counter()
    if check.launches_kernels:
        ctx.kernels_launched = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status, reason, details = check.fn(ctx)
        if check.launches_kernels and ctx.device.startswith("cuda"):
            ctx.torch.cuda.synchronize()
    except Outcome as o:
        status, reason, details = o.status, o.reason, o.details
    except Exception as e:  # noqa: BLE001 - a crashing check is a failed check, reported with its traceback
        tb = traceback.format_exc().strip().splitlines()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        status, reason, details = FAIL, f"{type(e).__name__}: {first}", {"traceback": tb[-12:]}
    return CheckResult(check.name, status, reason, time.perf_counter() - t0, details)


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def check_devices(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    devs = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devs.append({
            "index": i,
            "name": p.name,
            "capability": f"{p.major}.{p.minor}",
            "capability_major": p.major,
            "capability_minor": p.minor,
            "memory_gib": round(p.total_memory / 2**30, 2),
            "multiprocessors": p.multi_processor_count,
            "uuid": str(getattr(p, "uuid", "")) or None,
        })
    ctx.devices = devs
    summary = "; ".join(f"{d['index']}: {d['name']} ({d['capability']}, {d['memory_gib']:.0f} GiB)" for d in devs)
    return PASS, summary, {
        "devices": devs,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "NVIDIA_VISIBLE_DEVICES": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
    }


def check_driver(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    info = read_driver_info()
    image_cuda = str(ctx.options.spec.get("cuda") or "") or torch.version.cuda
    min_driver = ctx.options.spec.get("min_driver")
    verdict = judge_driver(image_cuda, info, str(min_driver) if min_driver else None)
    details = {
        "driver_version": info.version,
        "driver_version_source": info.source,
        "driver_cuda_supported": info.cuda_supported,
        "runtime_cuda": torch.version.cuda,
        "image_cuda": image_cuda,
        "required_driver": verdict.required,
        "required_source": "spec JSON min_driver" if min_driver else "NVIDIA minor-version compatibility table",
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "notes": info.notes,
    }
    details["nccl"] = _nccl_version(torch)
    status, reason = verdict.status, verdict.reason
    compat = "/usr/local/cuda/compat" in os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if ctx.options.spec.get("forward_compat"):
        details["cuda_compat_in_use"] = compat
        reason += ("; CUDA forward compatibility: the image's cuda-compat libcuda is in use (the host driver is "
                   "older)" if compat else "; CUDA forward compatibility not needed (the host driver is new enough)")
    py = str(ctx.options.spec.get("python") or "")
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    details["python"] = platform.python_version() + ("t" if sysconfig_gil_disabled() else "")
    details["gil_enabled"] = gil
    if py.endswith("t") and status != FAIL:
        if not sysconfig_gil_disabled():
            status, reason = FAIL, (f"the image is for the free-threaded Python {py}, but this interpreter "
                                    f"({sys.executable}) is a GIL build")
        elif gil:
            reason += (f"; free-threaded Python {py}, but the GIL is on: an imported extension does not declare "
                       "free-threading support (or PYTHON_GIL=1)")
    return status, reason, details


def sysconfig_gil_disabled() -> bool:
    """A free-threaded CPython build (``Py_GIL_DISABLED``, PEP 703)."""
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _nccl_version(torch: Any) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - no NCCL in this build
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple | list) else str(v)


def check_arch_torch(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    names = list(torch.cuda.get_arch_list())
    entries = [a for a in (parse_arch(n) for n in names) if a is not None]
    per_device = []
    bad = []
    for d, cap in zip(ctx.devices, ctx.caps(), strict=True):
        e = best_arch(cap, entries)
        per_device.append({"device": d["index"], "capability": d["capability"], "uses": describe_coverage(cap, e)})
        if e is None:
            bad.append(f"device {d['index']} ({d['name']}, {d['capability']}): {why_not_runnable(cap, entries)}")
    details = {"arch_list": names, "coverage": per_device, "before_first_kernel_launch": not ctx.kernels_launched}
    if bad:
        return FAIL, "torch has no kernel image for " + "; ".join(bad) + \
            ". Install a torch build whose arch list covers these GPUs.", details
    return PASS, "; ".join(f"{c['capability']}: {c['uses']}" for c in per_device), details


def check_arch_extensions(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    notes: list[str] = []
    reader = find_fatbin_reader(ctx.here, notes)
    roots = scan_roots(ctx.options.scan)
    details: dict[str, Any] = {
        "reader": reader.describe if reader else None,
        "reader_notes": notes,
        "roots": roots,
        "before_first_kernel_launch": not ctx.kernels_launched,
    }
    candidates = []
    scanned = 0
    for root, path in iter_shared_objects(roots):
        scanned += 1
        names = elf_sections(path)
        # without a bundled ELF reader every library is a candidate: the reader (cuobjdump) looks
        if (names and any(s in names for s in FATBIN_SECTIONS)) or bundled("fatbin") is None:
            candidates.append((root, path))
    details["shared_objects_scanned"] = scanned
    details["with_device_code"] = len(candidates)
    if reader is None:
        found = ", ".join(os.path.basename(p) for _, p in candidates[:8])
        raise Outcome(SKIP, f"no fat-binary reader (fatbin.py is not next to checks.py and cuobjdump is not on "
                            f"PATH); {len(candidates)} binaries with device code not checked"
                            + (f": {found}" if found else ""), details)
    binaries = []
    not_runnable = []
    unreadable = []
    outside: list[str] = []  # binaries whose device code was found only by a whole-file scan
    for root, path in candidates:
        rel = os.path.relpath(path, root)
        try:
            entries = sorted(set(reader.entries(path)))
        except Exception as e:  # noqa: BLE001 - a broken file is reported, the scan goes on
            unreadable.append({"binary": rel, "error": f"{type(e).__name__}: {e}"})
            continue
        row: dict[str, Any] = {"binary": rel}
        # A closer look only where .nv_fatbin alone leaves a device uncovered: first the whole file
        # (libraries that load their own device code), then inside the cubins (kernel-free stubs).
        if any(best_arch(cap, entries) is None for cap in ctx.caps()):
            try:
                if reader.can_scan_whole_file:
                    everything = sorted(set(reader.entries(path, whole_file=True)))
                    if set(everything) - set(entries):
                        entries = everything
                        outside.append(rel)
                        row["note"] = "device code found outside .nv_fatbin by a whole-file scan " \
                                      "(the library loads it itself)"
                if any(best_arch(cap, entries) is None for cap in ctx.caps()):
                    listed, free = reader.listing(path, whole_file=rel in outside)
                    stubs = {a for a in set(free) if free.count(a) == listed.count(a)}
                    if stubs:
                        row["kernel_free"] = sorted(a.name for a in stubs)
                        entries = [a for a in entries if a not in stubs]
                        if not entries:
                            row["note"] = "only kernel-free device-link stubs (" + \
                                          ", ".join(sorted(a.name for a in stubs)) + "): nothing to launch"
                            row["archs"] = ""
                            binaries.append(row)
                            continue
            except Exception as e:  # noqa: BLE001 - keep the section's verdict, say why
                notes.append(f"{rel}: closer look failed: {type(e).__name__}: {e}")
        row["archs"] = " ".join(a.name for a in entries)
        if not entries:
            row["note"] = "no SASS or PTX (only LTO-IR or relocatable code)"
            binaries.append(row)
            continue
        cover = {}
        for d, cap in zip(ctx.devices, ctx.caps(), strict=True):
            best = best_arch(cap, entries)
            cover[str(d["index"])] = describe_coverage(cap, best)
            if best is None:
                not_runnable.append({
                    "binary": os.path.basename(path),
                    "path": path,
                    "device": d["index"],
                    "device_name": d["name"],
                    "capability": d["capability"],
                    "has": [a.name for a in entries],
                    "why": why_not_runnable(cap, entries),
                })
        row["coverage"] = cover
        binaries.append(row)
    details["not_runnable"] = not_runnable
    details["unreadable"] = unreadable
    details["device_code_outside_nv_fatbin"] = outside
    details["binaries"] = binaries
    if not candidates:
        return PASS, f"{scanned} shared objects scanned, none carries CUDA device code", details
    if not_runnable:
        shown = "; ".join(
            f"{n['binary']} is not runnable on device {n['device']} ({n['device_name']}, {n['capability']}): "
            f"{n['why']}" for n in not_runnable[:5]
        )
        more = f" (and {len(not_runnable) - 5} more)" if len(not_runnable) > 5 else ""
        return FAIL, shown + more + ". Rebuild with TORCH_CUDA_ARCH_LIST (or the package's own arch " \
            "variable) covering these GPUs, or add +PTX on the newest arch.", details
    note = ""
    if unreadable:  # a reader limitation, not a finding about the image: reported, not failed
        note = f"; {len(unreadable)} could not be read: " + ", ".join(u["binary"] for u in unreadable[:5])
    return PASS, f"{len(candidates) - len(unreadable)} binaries with device code all cover every device " \
        f"({scanned} shared objects scanned){note}", details


def _rel_err(torch: Any, out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 (3 significant digits); NaN if ``out`` is not all finite."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(o).all()):
        return float("nan")
    return float(f"{float((o - r).norm() / r.norm()):.3g}")


def _judge(results: dict[str, dict[str, Any]]) -> tuple[str, str]:
    bad = [f"{k}: error {v['error']:.2e} > {v['tolerance']:.0e}" for k, v in results.items()
           if not rel_error_ok(v["error"], v["tolerance"])]
    if bad:
        return FAIL, "; ".join(bad)
    return PASS, ", ".join(f"{k} {v['error']:.1e}" for k, v in results.items())


def _gen(torch: Any, seed: int) -> Any:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def check_matmul(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    m, k, n = 768, 1024, 520  # deliberately not all powers of two
    g = _gen(torch, 1)
    a = torch.randn(m, k, generator=g, dtype=torch.float32)
    b = torch.randn(k, n, generator=g, dtype=torch.float32)
    results: dict[str, dict[str, Any]] = {}
    prec = torch.get_float32_matmul_precision()
    try:
        ref32 = a.double() @ b.double()
        for label, mode in (("fp32", "highest"), ("tf32", "high")):
            torch.set_float32_matmul_precision(mode)
            out = a.to(ctx.device) @ b.to(ctx.device)
            results[label] = {"error": _rel_err(torch, out, ref32), "tolerance": TOLERANCE[label]}
    finally:
        torch.set_float32_matmul_precision(prec)
    for label, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        a16, b16 = a.to(dt), b.to(dt)
        ref = a16.double() @ b16.double()
        out = a16.to(ctx.device) @ b16.to(ctx.device)
        if out.dtype != dt:
            raise Outcome(FAIL, f"{label} matmul returned {out.dtype}")
        results[label] = {"error": _rel_err(torch, out, ref), "tolerance": TOLERANCE[label]}
    status, reason = _judge(results)
    tf32_seen = results["tf32"]["error"] > 10 * max(results["fp32"]["error"], 1e-12)
    return status, reason, {"shape": [m, k, n], "results": results,
                            "tf32_used": tf32_seen, "reference": "float64 on the CPU"}


def check_conv(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    F = torch.nn.functional
    if ctx.device.startswith("cuda") and not torch.backends.cudnn.is_available():
        raise Outcome(FAIL, "cuDNN is not available to torch (torch.backends.cudnn.is_available() is False)")
    g = _gen(torch, 2)
    x = torch.randn(8, 16, 40, 40, generator=g)
    w = torch.randn(32, 16, 3, 3, generator=g) / 12.0
    bias = torch.randn(32, generator=g)
    results: dict[str, dict[str, Any]] = {}
    ref = F.conv2d(x.double(), w.double(), bias.double(), padding=1)
    dev = ctx.device
    out = F.conv2d(x.to(dev), w.to(dev), bias.to(dev), padding=1)
    tol = "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
    results[f"fp32 ({tol} allowed)" if tol == "tf32" else "fp32"] = {
        "error": _rel_err(torch, out, ref), "tolerance": TOLERANCE[tol]}
    xh, wh, bh = x.half(), w.half(), bias.half()
    ref_h = F.conv2d(xh.double(), wh.double(), bh.double(), padding=1)
    out_h = F.conv2d(xh.to(dev).to(memory_format=torch.channels_last),
                     wh.to(dev).to(memory_format=torch.channels_last), bh.to(dev), padding=1)
    results["fp16 channels_last"] = {"error": _rel_err(torch, out_h, ref_h), "tolerance": TOLERANCE["fp16"]}
    status, reason = _judge(results)
    return status, reason, {"cudnn_version": torch.backends.cudnn.version(), "input": list(x.shape),
                            "weight": list(w.shape), "results": results}


def _sdpa_reference(torch: Any, q: Any, k: Any, v: Any, causal: bool) -> Any:
    q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        L = q.shape[-2]
        mask = torch.ones(L, L, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


#: how torch says that a restricted SDPA backend cannot take the inputs (not a wrong result)
_SDPA_UNAVAILABLE = ("No available kernel", "No viable backend", "not supported")


def check_sdpa(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    F = torch.nn.functional
    g = _gen(torch, 3)
    shape = (2, 8, 256, 64)
    backends: list[tuple[str, Any]] = []
    sdpa_kernel: Any = None
    try:
        attention = importlib.import_module("torch.nn.attention")
        sdpa_kernel = attention.sdpa_kernel
        for label in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
            if hasattr(attention.SDPBackend, label):
                backends.append((label.lower(), getattr(attention.SDPBackend, label)))
    except (ImportError, AttributeError):  # torch < 2.3: only the default path is checked
        sdpa_kernel = None
    results: dict[str, dict[str, Any]] = {}
    unavailable: dict[str, str] = {}
    errors: dict[str, str] = {}
    for dname, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        q, k, v = (torch.randn(*shape, generator=g).to(dt) for _ in range(3))
        qc, kc, vc = q.to(ctx.device), k.to(ctx.device), v.to(ctx.device)
        for causal in (False, True):
            ref = _sdpa_reference(torch, q, k, v, causal)
            tag = f"{dname}{' causal' if causal else ''}"
            out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
            results[f"{tag} default"] = {"error": _rel_err(torch, out, ref), "tolerance": TOLERANCE[dname]}
            if sdpa_kernel is None:
                continue
            for bname, backend in backends:
                try:
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
                except RuntimeError as e:
                    first = (str(e).strip().splitlines() or [""])[0][:200]
                    if any(m in str(e) for m in _SDPA_UNAVAILABLE):
                        unavailable.setdefault(bname, first)
                    else:  # the backend exists for these inputs and broke: a finding
                        errors[f"{tag} {bname}"] = f"{type(e).__name__}: {first}"
                    continue
                results[f"{tag} {bname}"] = {"error": _rel_err(torch, out, ref), "tolerance": TOLERANCE[dname]}
    status, reason = _judge(results)
    details = {"shape_bhld": list(shape), "results": results, "unavailable": unavailable, "errors": errors}
    if errors:
        failed = "; ".join(f"{k}: {v}" for k, v in errors.items())
        return FAIL, failed if status == PASS else f"{reason}; {failed}", details
    if status == FAIL:
        return FAIL, reason, details
    worst = max(results.items(), key=lambda kv: kv[1]["error"])
    used = sorted({k.split()[-1] for k in results if not k.endswith("default")})
    return PASS, f"{len(results)} cases within tolerance (worst {worst[0]} {worst[1]['error']:.1e}); " \
        f"backends run: {', '.join(used) or 'default only'}", details


def check_autocast(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    nn = torch.nn
    g = _gen(torch, 4)
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 256))
    x = torch.randn(64, 512, generator=g)
    ref_model = [p.detach().double().requires_grad_(True) for p in model.parameters()]
    w1, b1, w2, b2 = ref_model
    xr = x.double()
    y_ref = torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(xr, w1, b1)), w2, b2)
    y_ref.pow(2).mean().backward()
    grad_ref = w1.grad
    model = model.to(ctx.device)
    results: dict[str, dict[str, Any]] = {}
    dtypes = {}
    for dname, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        model.zero_grad(set_to_none=True)
        with torch.autocast(ctx.device.split(":")[0], dtype=dt):
            y = model(x.to(ctx.device))
        dtypes[dname] = str(y.dtype).replace("torch.", "")
        if y.dtype != dt:
            raise Outcome(FAIL, f"autocast to {dname} produced {y.dtype}: autocast is not active",
                          {"output_dtypes": dtypes})
        y.float().pow(2).mean().backward()
        results[f"{dname} forward"] = {"error": _rel_err(torch, y, y_ref), "tolerance": TOLERANCE[f"autocast_{dname}"]}
        results[f"{dname} weight grad"] = {"error": _rel_err(torch, model[0].weight.grad, grad_ref),
                                           "tolerance": TOLERANCE[f"autocast_grad_{dname}"]}
    status, reason = _judge(results)
    return status, reason, {"model": "Linear(512,1024) GELU Linear(1024,256), batch 64", "output_dtypes": dtypes,
                            "results": results}


def _timed_products(torch: Any, a: Any, b: Any, count: int) -> tuple[float, Any]:
    """Seconds per product over ``count`` back-to-back products, timed between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        c = a @ b
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / count, c


def check_throughput(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    """bf16 n x n matmul: 3 warm-up products, then ``matmul_iters`` back to back between two CUDA
    events (the usual way to quote a GPU's matmul rate, and the one of scripts/gpu/bench_bf16.py);
    then about one second of products in a row, because power and thermal limits lower the clocks
    under sustained load (seen on an H100: 786 TFLOP/s for 20 products, about 670 after a second)."""
    torch = ctx.torch
    rows = []
    worst_fail = []
    for d in ctx.devices:
        i = d["index"]
        n = ctx.options.matmul_size
        free, _total = torch.cuda.mem_get_info(i)
        while n > 1024 and 4 * n * n * 2 > free * 0.8:
            n //= 2
        flops = 2.0 * n ** 3
        with torch.cuda.device(i):
            g = torch.Generator(device=f"cuda:{i}")
            g.manual_seed(5)
            a = torch.randn(n, n, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
            b = torch.randn(n, n, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
            for _ in range(3):
                a @ b
            torch.cuda.synchronize(i)
            per, c = _timed_products(torch, a, b, ctx.options.matmul_iters)
            sustained_count = max(ctx.options.matmul_iters, int(1.0 / max(per, 1e-6)))
            per_sustained, _ = _timed_products(torch, a, b, sustained_count)
            # spot-check the result: 8 rows against an fp32 product of the same bf16 inputs
            prec = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("highest")
            try:
                ref = a[:8].float() @ b.float()
            finally:
                torch.set_float32_matmul_precision(prec)
            err = _rel_err(torch, c[:8], ref)
            del a, b, c
        row: dict[str, Any] = {
            "device": i, "name": d["name"], "n": n, "iterations": ctx.options.matmul_iters,
            "tflops": round(flops / per / 1e12, 1),
            "tflops_sustained": round(flops / per_sustained / 1e12, 1),
            "sustained_products": sustained_count,
            "sustained_seconds": round(per_sustained * sustained_count, 2),
            "spot_check_error": err,
        }
        peak = bf16_peak(d["name"])
        if peak is not None:
            row["peak_tflops"] = peak[0]
            row["peak_source"] = f"{peak[1]} dense bf16, NVIDIA datasheet"
            row["fraction_of_peak"] = round(row["tflops"] / peak[0], 3)
            if row["fraction_of_peak"] < ctx.options.min_peak_fraction:
                worst_fail.append(f"device {i} reached {row['tflops']} TFLOP/s, "
                                  f"{row['fraction_of_peak']:.0%} of its {peak[0]} peak "
                                  f"(below {ctx.options.min_peak_fraction:.0%}: clocks, power or thermal limits?)")
        else:
            row["peak_tflops"] = None
        if not rel_error_ok(err, TOLERANCE["bf16"]):
            worst_fail.append(f"device {i} product is wrong (error {err:.2e})")
        rows.append(row)
    reason = "; ".join(
        f"{r['name']}: {r['tflops']} TFLOP/s"
        + (f" ({r['fraction_of_peak']:.0%} of {r['peak_tflops']} peak)" if r.get("peak_tflops") else " (peak unknown)")
        + f", {r['tflops_sustained']} sustained over {r['sustained_seconds']} s"
        for r in rows
    )
    details = {"devices": rows, "dtype": "bfloat16",
               "timing": f"mean of {ctx.options.matmul_iters} back-to-back products after 3 warm-ups, CUDA events"}
    if worst_fail:
        return FAIL, "; ".join(worst_fail), details
    return PASS, f"bf16 {rows[0]['n']}^3 matmul: " + reason, details


def _nccl_worker(rank: int, world: int, init_method: str, out_dir: str, nbytes: int, iters: int,
                 device: str = "cuda") -> None:
    """One rank of the all-reduce check (top level so that the spawn start method can import it).

    ``device`` "cuda" uses NCCL on GPU ``rank``; "cpu" uses gloo (the unit tests run it so).
    """
    result: dict[str, Any] = {"rank": rank}
    try:
        import datetime

        import torch
        import torch.distributed as dist

        on_gpu = device.startswith("cuda")
        if on_gpu:
            torch.cuda.set_device(rank)
        dev = f"cuda:{rank}" if on_gpu else "cpu"

        def sync() -> None:
            if on_gpu:
                torch.cuda.synchronize()

        dist.init_process_group("nccl" if on_gpu else "gloo", init_method=init_method, rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
        try:
            n = 1 << 20
            base = (torch.arange(n, device=dev) % 1024).float()
            t = base + rank
            dist.all_reduce(t)
            expected = base * world + world * (world - 1) / 2
            result["correct"] = bool(torch.equal(t, expected))
            result["max_abs_error"] = float((t - expected).abs().max())
            g = torch.Generator(device=dev)
            g.manual_seed(6 + rank)
            buf = torch.randn(nbytes // 4, device=dev, generator=g) * 1e-3
            for _ in range(5):
                dist.all_reduce(buf)
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            sync()
            dt = torch.tensor([(time.perf_counter() - t0) / iters], device=dev)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            result["seconds_per_op"] = float(dt.item())
        finally:
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - written to the rank's file and reported by the parent
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc().strip().splitlines()[-8:]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s for an all-reduce (nccl-tests' definitions)."""
    alg = nbytes / seconds / 1e9
    return alg, alg * 2 * (world - 1) / world


def check_nccl(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    world = len(ctx.devices)
    if world < 2:
        raise Outcome(SKIP, f"{world} GPU visible: an all-reduce needs two or more")
    import torch.distributed as dist
    on_gpu = ctx.device.startswith("cuda")
    if not dist.is_available() or (on_gpu and not dist.is_nccl_available()):
        raise Outcome(FAIL, "this torch build has no NCCL backend (torch.distributed.is_nccl_available() is False)")
    import multiprocessing as mp
    mpctx = mp.get_context("spawn")
    nbytes, iters = ctx.options.nccl_bytes, ctx.options.nccl_iters
    with tempfile.TemporaryDirectory(prefix="kiln-nccl-") as tmp:
        init = f"file://{os.path.join(tmp, 'rendezvous')}"
        procs = [mpctx.Process(target=_nccl_worker, args=(r, world, init, tmp, nbytes, iters, ctx.device))
                 for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + ctx.options.nccl_timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        ranks = []
        for r in range(world):
            path = os.path.join(tmp, f"rank{r}.json")
            try:
                with open(path) as f:
                    ranks.append(json.load(f))
            except (OSError, ValueError):
                ranks.append({"rank": r, "error": f"no result (exit code {procs[r].exitcode})"})
    details: dict[str, Any] = {"world_size": world, "bytes": nbytes, "iterations": iters,
                               "nccl_version": _nccl_version(torch),
                               "backend": "nccl" if on_gpu else "gloo", "ranks": ranks, "rendezvous": "file://"}
    if hung:
        raise Outcome(FAIL, f"ranks {hung} did not finish within {ctx.options.nccl_timeout:.0f} s", details)
    errors = [f"rank {r['rank']}: {r['error']}" for r in ranks if "error" in r]
    if errors:
        text = "; ".join(errors)
        if re.search(r"/dev/shm|shared memory|shm", text, re.IGNORECASE):
            text += " (NCCL needs more /dev/shm than docker's default 64 MiB: run the container with " \
                    "--ipc=host or --shm-size=1g)"
        raise Outcome(FAIL, text, details)
    wrong = [r["rank"] for r in ranks if not r.get("correct")]
    if wrong:
        raise Outcome(FAIL, f"all-reduce gave a wrong sum on ranks {wrong}", details)
    secs = max(r["seconds_per_op"] for r in ranks)
    alg, bus = bus_bandwidth(nbytes, secs, world)
    details.update({"seconds_per_op": secs, "algbw_gbs": round(alg, 1), "busbw_gbs": round(bus, 1)})
    who = f"{world} GPUs" if on_gpu else f"{world} CPU ranks (gloo)"
    return PASS, f"{who}, sum correct; {nbytes >> 20} MiB all-reduce: bus bandwidth {bus:.1f} GB/s " \
        f"(algorithm {alg:.1f} GB/s)", details


def spec_extensions(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The spec's extensions as [{"name", "import"}]; strings are pip names."""
    out = []
    for item in spec.get("extensions", []) or []:
        if isinstance(item, str):
            name, imp = item, None
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            name, imp = item["name"], item.get("import")
        else:
            raise ValueError(f"extensions: each item must be a name or {{'name': ..., 'import': ...}}, got {item!r}")
        key = name.lower().replace("_", "-")
        out.append({"name": name, "import": str(imp or KNOWN_EXTENSIONS.get(key) or key.replace("-", "_"))})
    return out


def _attention_inputs(torch: Any, dt: Any) -> tuple[Any, Any, Any]:
    g = torch.Generator(device="cpu")
    g.manual_seed(7)
    # (batch, seqlen, heads, headdim): the layout flash-attn and xformers take
    q, k, v = (torch.randn(2, 128, 4, 64, generator=g).to(dt).cuda() for _ in range(3))
    return q, k, v


def _sdpa_blhd(torch: Any, q: Any, k: Any, v: Any, causal: bool) -> Any:
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return o.transpose(1, 2)


def call_extension(torch: Any, import_name: str, mod: Any) -> dict[str, Any]:
    """One small real call of a known extension, compared with torch; {} when none is known."""
    if import_name in ("flash_attn", "flash_attn_interface"):
        q, k, v = _attention_inputs(torch, torch.bfloat16)
        out = mod.flash_attn_func(q, k, v, causal=True)
        if isinstance(out, tuple):
            out = out[0]
        ref = _sdpa_blhd(torch, q, k, v, True)
        return {"call": f"{import_name}.flash_attn_func(causal=True) vs SDPA, bf16",
                "error": _rel_err(torch, out, ref), "tolerance": TOLERANCE["bf16"]}
    if import_name == "xformers":
        ops = importlib.import_module("xformers.ops")
        q, k, v = _attention_inputs(torch, torch.float16)
        out = ops.memory_efficient_attention(q, k, v)
        ref = _sdpa_blhd(torch, q, k, v, False)
        return {"call": "xformers.ops.memory_efficient_attention vs SDPA, fp16",
                "error": _rel_err(torch, out, ref), "tolerance": TOLERANCE["fp16"]}
    if import_name == "apex":
        norm = importlib.import_module("apex.normalization")
        x = torch.randn(64, 1024, device="cuda")
        ln = norm.FusedLayerNorm(1024).cuda()
        out = ln(x)
        ref = torch.nn.functional.layer_norm(x, (1024,), ln.weight, ln.bias, ln.eps)
        return {"call": "apex.normalization.FusedLayerNorm vs torch layer_norm, fp32",
                "error": _rel_err(torch, out, ref), "tolerance": TOLERANCE["fp32"]}
    return {}


def check_extensions(ctx: Context) -> tuple[str, str, dict[str, Any]]:
    torch = ctx.torch
    try:
        wanted = spec_extensions(ctx.options.spec)
    except ValueError as e:
        raise Outcome(FAIL, f"spec JSON: {e}") from None
    source = "spec"
    if not wanted and "extensions" not in ctx.options.spec:
        source = "detected"
        wanted = [{"name": n, "import": i} for n, i in KNOWN_EXTENSIONS.items() if importlib.util.find_spec(i)]
        if not wanted:
            raise Outcome(SKIP, "no spec given and none of " + ", ".join(KNOWN_EXTENSIONS) + " is installed")
    if not wanted:
        raise Outcome(SKIP, "the spec names no extensions")
    rows = []
    failed = []
    for ext in wanted:
        row: dict[str, Any] = {"name": ext["name"], "import": ext["import"]}
        try:
            mod = importlib.import_module(ext["import"])
            row["version"] = str(getattr(mod, "__version__", "")) or None
            call = call_extension(torch, ext["import"], mod)
            torch.cuda.synchronize()
            if call:
                row.update(call)
                if not rel_error_ok(call["error"], call["tolerance"]):
                    failed.append(f"{ext['name']}: {call['call']} error {call['error']:.2e}")
            else:
                row["call"] = "import only (torchkiln knows no small call for this package)"
        except Exception as e:  # noqa: BLE001 - an import or call failure is this check's finding
            row["failure"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
            failed.append(f"{ext['name']}: {row['failure']}")
        rows.append(row)
    details = {"source": source, "extensions": rows}
    if failed:
        return FAIL, "; ".join(failed), details
    return PASS, ", ".join(
        f"{r['name']} {r.get('version') or ''}".strip() + (f" ({r['error']:.1e})" if "error" in r else "")
        for r in rows), details


CHECKS: tuple[CheckDef, ...] = (
    CheckDef("devices", check_devices, False, "Devices"),
    CheckDef("driver", check_driver, False, "Driver and runtime"),
    CheckDef("arch_torch", check_arch_torch, False, "torch arch list covers every device"),
    CheckDef("arch_extensions", check_arch_extensions, False, "Compiled extensions cover every device"),
    CheckDef("matmul", check_matmul, True, "Matmul fp32/tf32/fp16/bf16 vs CPU"),
    CheckDef("conv_cudnn", check_conv, True, "cuDNN convolution vs CPU"),
    CheckDef("sdpa", check_sdpa, True, "scaled_dot_product_attention vs CPU"),
    CheckDef("autocast", check_autocast, True, "Autocast forward + backward"),
    CheckDef("throughput", check_throughput, True, "bf16 matmul throughput"),
    CheckDef("nccl", check_nccl, True, "NCCL all-reduce"),
    CheckDef("extensions", check_extensions, True, "Spec extensions: import + call"),
)

CHECK_NAMES = ("torch_import", "cuda_available") + tuple(c.name for c in CHECKS)


# --------------------------------------------------------------------------------------------
# Driver of the whole run
# --------------------------------------------------------------------------------------------


def _environment(torch: Any | None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    if torch is not None:
        env["torch"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
    return env


def build_report(results: list[CheckResult], environment: dict[str, Any], no_gpu: bool) -> dict[str, Any]:
    counts = {s: sum(1 for r in results if r.status == s) for s in (PASS, FAIL, SKIP)}
    if no_gpu:
        status, code = "no-gpu", EXIT_NO_GPU
    elif counts[FAIL]:
        status, code = "fail", EXIT_CHECK_FAILED
    else:
        status, code = "pass", EXIT_OK
    return {
        "schema": SCHEMA,
        "status": status,
        "exit_code": code,
        "summary": counts,
        "environment": environment,
        "checks": [r.to_dict() for r in results],
    }


def run_checks(options: Options) -> dict[str, Any]:
    """Run every selected check and return the report (a JSON-ready dict)."""
    report = _run_checks(options)
    report["spec"] = options.spec
    return report


def _run_checks(options: Options) -> dict[str, Any]:
    results: list[CheckResult] = []
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy" in numpy-free images
            torch = importlib.import_module("torch")
    except Exception as e:  # noqa: BLE001 - a missing or broken torch is the finding
        results.append(CheckResult("torch_import", FAIL, f"torch cannot be imported: {type(e).__name__}: {e}",
                                   time.perf_counter() - t0, {"sys.path": sys.path}))
        for name in CHECK_NAMES[1:]:
            results.append(CheckResult(name, SKIP, "torch cannot be imported", 0.0))
        return build_report(results, _environment(None), no_gpu=False)
    results.append(CheckResult("torch_import", PASS, f"torch {torch.__version__} (CUDA {torch.version.cuda})",
                               time.perf_counter() - t0, {"path": os.path.dirname(str(torch.__file__))}))
    ctx = Context(torch=torch, options=options)

    t0 = time.perf_counter()
    available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if available else 0
    if not available or count == 0:
        if torch.version.cuda is None:
            why = f"this torch ({torch.__version__}) is a CPU-only build (torch.version.cuda is None)"
        else:
            why = "torch.cuda.is_available() is False"
            try:
                torch.cuda.init()
            except Exception as e:  # noqa: BLE001 - torch's own reason is the most useful text
                why += f": {str(e).strip().splitlines()[0]}"
        info = read_driver_info()
        results.append(CheckResult(
            "cuda_available", FAIL, f"no CUDA device: {why}", time.perf_counter() - t0,
            {"device_count": count, "driver_version": info.version, "driver_notes": info.notes,
             "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "hint": "run on a machine with an NVIDIA GPU and driver; in a container pass the GPUs "
                     "(docker --gpus all, podman --device nvidia.com/gpu=all, apptainer --nv)"}))
        for c in CHECKS:
            results.append(CheckResult(c.name, SKIP, "no CUDA device", 0.0))
        return build_report(results, _environment(torch), no_gpu=True)
    results.append(CheckResult("cuda_available", PASS, f"{count} CUDA device(s)", time.perf_counter() - t0,
                               {"device_count": count}))

    for c in CHECKS:
        selected = (options.only is None or c.name in options.only) and c.name not in options.skip
        if c.name == "devices" or selected:  # every other check needs the device list
            r = _run_check(ctx, c)
            if selected:
                results.append(r)
            elif r.status == FAIL:
                results.append(r)
        else:
            results.append(CheckResult(c.name, SKIP, "not selected (--only / --skip)", 0.0))
    return build_report(results, _environment(torch), no_gpu=False)


def format_text(report: dict[str, Any]) -> str:
    """A plain-text table (the host CLI renders its own with rich)."""
    env = report.get("environment", {})
    lines = [f"torchkiln verify: torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda')}), "
             f"Python {env.get('python')}"]
    width = max((len(c["name"]) for c in report["checks"]), default=10)
    for c in report["checks"]:
        lines.append(f"  {c['status'].upper():4}  {c['name']:<{width}}  {c['seconds']:7.2f}s  {c['reason']}")
    s = report["summary"]
    verdict = {"pass": "OK", "fail": "FAILED", "no-gpu": "NO CUDA DEVICE"}[report["status"]]
    lines.append(f"{verdict}: {s['pass']} passed, {s['fail']} failed, {s['skip']} skipped")
    return "\n".join(lines)


def _names(text: str) -> set[str]:
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = names - set(CHECK_NAMES)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown check(s) {sorted(unknown)}; known: {', '.join(CHECK_NAMES)}")
    return names


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, Options]:
    p = argparse.ArgumentParser(prog="checks.py", description="torchkiln GPU checks (stdlib + torch only).")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--spec-json", metavar="FILE", help="JSON: {cuda, min_driver, extensions: [...]}")
    p.add_argument("--scan", action="append", default=[], metavar="DIR",
                   help="also scan DIR for compiled extensions (the import path is always scanned)")
    p.add_argument("--only", type=_names, help="comma-separated checks to run")
    p.add_argument("--skip", type=_names, default=set(), help="comma-separated checks to leave out")
    p.add_argument("--matmul-size", type=int, default=8192)
    p.add_argument("--matmul-iters", type=int, default=20)
    p.add_argument("--nccl-mib", type=int, default=256)
    p.add_argument("--min-peak-fraction", type=float, default=0.25)
    a = p.parse_args(argv)
    spec: dict[str, Any] = {}
    if a.spec_json:
        try:
            with open(a.spec_json, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--spec-json {a.spec_json}: {e}")
        if not isinstance(spec, dict):
            p.error(f"--spec-json {a.spec_json}: must hold a JSON object")
    if a.matmul_size < 256 or a.matmul_iters < 1 or a.nccl_mib < 1:
        p.error("--matmul-size must be >= 256, --matmul-iters and --nccl-mib >= 1")
    opts = Options(spec=spec, scan=list(a.scan), matmul_size=a.matmul_size, matmul_iters=a.matmul_iters,
                   nccl_bytes=a.nccl_mib << 20, min_peak_fraction=a.min_peak_fraction, only=a.only,
                   skip=set(a.skip))
    return a, opts


def main(argv: list[str] | None = None) -> int:
    args, options = parse_args(list(sys.argv[1:] if argv is None else argv))
    report = run_checks(options)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(format_text(report) + "\n")
    sys.stdout.flush()
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
