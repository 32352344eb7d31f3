"""GPU architectures and the rules that decide whether compiled code runs on a device.

Pure functions, no I/O. Shared by the resolver (does the chosen wheel cover the targets?), the
inspector (does this binary cover them?) and verify.

Rules (NVIDIA CUDA compatibility guide, see ``knowledge/gpus.toml`` sources):

* SASS (a cubin) for ``sm_XY`` runs on a device of the same major with minor >= Y.
* Arch-specific SASS ``sm_XYa`` runs only on exactly X.Y; family SASS ``sm_XYf`` runs on the
  devices of family X with minor >= Y.
* PTX for ``compute_XY`` can be JIT-compiled by the driver for any device with capability >= X.Y
  (given a driver at least as new as the toolkit that wrote the PTX). The suffixes bind PTX too:
  ``compute_XYa`` only on exactly X.Y, ``compute_XYf`` only within family X with minor >= Y.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["sass", "ptx"]


@dataclass(frozen=True, order=True)
class Capability:
    """A compute capability such as 9.0 (major 9, minor 0)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Parse ``"9.0"``, ``"90"``, ``"sm_90"``, ``"compute_90"``, ``"sm_100a"`` (suffix dropped)."""
        t = text.strip().lower()
        m = re.fullmatch(r"(\d{1,2})\.(\d)", t)
        if m:
            return cls(int(m.group(1)), int(m.group(2)))
        m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})[af]?", t)
        if m:
            n = int(m.group(1))
            return cls(n // 10, n % 10)
        raise ValueError(f"not a compute capability: {text!r}")

    @property
    def number(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True, order=True)
class ArchEntry:
    """One piece of device code: SASS for ``sm_XY[a|f]`` or PTX for ``compute_XY``."""

    kind: Kind
    capability: Capability
    suffix: Literal["", "a", "f"] = ""

    @property
    def name(self) -> str:
        prefix = "sm_" if self.kind == "sass" else "compute_"
        return f"{prefix}{self.capability.number}{self.suffix}"

    def runs_on(self, device: Capability) -> bool:
        c = self.capability
        if self.suffix == "a":  # arch-specific SASS or PTX: exactly this device
            return device == c
        if self.kind == "ptx" and self.suffix == "":
            return device >= c
        # plain SASS, and family SASS or PTX: same major, minor not older
        return device.major == c.major and device.minor >= c.minor

    @classmethod
    def parse(cls, text: str) -> ArchEntry:
        """Parse ``sm_90``, ``sm_90a``, ``compute_90``."""
        m = re.fullmatch(r"(sm|compute)_(\d{2,3})([af]?)", text.strip().lower())
        if not m:
            raise ValueError(f"not an architecture name: {text!r}")
        kind: Kind = "sass" if m.group(1) == "sm" else "ptx"
        n = int(m.group(2))
        suffix = m.group(3)
        return cls(kind, Capability(n // 10, n % 10), suffix)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Coverage:
    """How (or whether) a device can run a set of entries."""

    device: Capability
    entry: ArchEntry | None  # the best entry that runs, None = "no kernel image"

    @property
    def covered(self) -> bool:
        return self.entry is not None

    @property
    def how(self) -> str:
        if self.entry is None:
            return "no kernel image"
        if self.entry.kind == "ptx":
            return f"PTX {self.entry.name} (JIT by the driver)"
        if self.entry.capability == self.device:
            return f"SASS {self.entry.name}"
        return f"SASS {self.entry.name} (same major, binary compatible)"


def coverage(device: Capability, entries: Iterable[ArchEntry]) -> Coverage:
    """The entry a device would use: exact SASS, else newest compatible SASS, else newest PTX."""
    runnable = [e for e in entries if e.runs_on(device)]
    sass = [e for e in runnable if e.kind == "sass"]
    if sass:
        return Coverage(device, max(sass, key=lambda e: (e.capability, e.suffix == "a")))
    ptx = [e for e in runnable if e.kind == "ptx"]
    if ptx:
        return Coverage(device, max(ptx, key=lambda e: e.capability))
    return Coverage(device, None)


def parse_arch_list(text: str) -> tuple[ArchEntry, ...]:
    """Parse a ``TORCH_CUDA_ARCH_LIST`` string (``;`` or space separated, ``+PTX`` suffixes).

    ``"8.0;9.0+PTX"`` gives SASS sm_80, SASS sm_90 and PTX compute_90.
    """
    out: list[ArchEntry] = []
    for item in re.split(r"[;\s]+", text.strip()):
        if not item:
            continue
        ptx = item.upper().endswith("+PTX")
        base = item[:-4] if ptx else item
        cap = Capability.parse(base)
        out.append(ArchEntry("sass", cap))
        if ptx:
            out.append(ArchEntry("ptx", cap))
    return tuple(out)


def format_arch_list(caps: Iterable[Capability], ptx_for: Capability | None = None) -> str:
    """Render a ``TORCH_CUDA_ARCH_LIST`` value: sorted, unique, ``;``-separated, ``+PTX`` on one."""
    items = []
    for c in sorted(set(caps)):
        items.append(f"{c}+PTX" if ptx_for is not None and c == ptx_for else str(c))
    return ";".join(items)
