"""Shared pieces of the CLI: consoles, the debug flag, JSON output, option types."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console

from torchkiln.redact import redact, redact_data


class _Redacting:
    """A stream that masks credentials in everything written to it, then writes to sys.stdout/stderr.

    The stream is looked up at each write (tests and ``typer`` swap sys.stdout); the rest of the file
    interface (isatty, fileno, encoding) is the real stream's, so rich detects terminals as before.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def _stream(self) -> TextIO:
        stream: TextIO = getattr(sys, self._name)
        return stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._stream, attr)


def _width(name: str) -> int | None:
    """Piped output is not cut to rich's 80 columns: tables get room for their values (COLUMNS wins)."""
    stream = getattr(sys, name)
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty or os.environ.get("COLUMNS") else 200


console = Console(file=_Redacting("stdout"), highlight=False, soft_wrap=True, width=_width("stdout"))  # type: ignore[arg-type]
err_console = Console(file=_Redacting("stderr"), highlight=False, soft_wrap=True, width=_width("stderr"))  # type: ignore[arg-type]


@dataclass
class _State:
    debug: bool = False


state = _State()

SpecArg = Annotated[
    Path,
    typer.Argument(help="Path to a kiln.toml spec (or a folder that holds one).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
# the base of an Apptainer definition (kiln render --format apptainer, kiln build --engine apptainer)
FromOpt = Annotated[
    str | None,
    typer.Option("--from", help="apptainer: the base image reference, or the archive / .sif path for "
                 "docker-archive, oci-archive and localimage (default: the plan's base image)."),
]
BuilderFromOpt = Annotated[
    str | None,
    typer.Option("--builder-from", help="apptainer: the compiling stage's base when extensions build on a "
                 "CUDA devel image (default: the plan's toolchain image; a file for the file bootstraps)."),
]


def host_resources() -> tuple[int, float]:
    """This machine's CPU cores (the ones this process may use) and available memory in GiB."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem_gib = int(line.split()[1]) / 1024**2
                break
    except OSError:  # pragma: no cover - not Linux
        pass
    return cores, mem_gib or 8.0


def duration(minutes: float) -> str:
    if minutes < 1:
        return "< 1 min"
    if minutes < 90:
        return f"~{minutes:.0f} min"
    return f"~{minutes / 60:.1f} h"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(redact_data(data), indent=2, sort_keys=False) + "\n")


def spec_path(path: Path) -> Path:
    """Accept a spec file or a folder containing ``kiln.toml``."""
    return path / "kiln.toml" if path.is_dir() else path


def human_size(n: int | float) -> str:
    """Bytes for people, the one convention of every command: decimal units, as docker and the docs
    write them (17 B, 12.0 kB, 860.6 MB, 5.9 GB)."""
    v = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(v) < 1000:
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB"


# the package-source options of kiln build and kiln lock (the same four, the same help)
IndexUrlOpt = Annotated[str | None, typer.Option("--index-url", help="Package index (URL or local PEP 503 folder).")]
ExtraIndexUrlOpt = Annotated[list[str] | None, typer.Option("--extra-index-url", help="Additional index (repeatable).")]
FindLinksOpt = Annotated[list[str] | None, typer.Option("--find-links", help="Wheel folder or URL (repeatable).")]
TorchIndexOpt = Annotated[str | None, typer.Option("--torch-index", help="Index of the torch variant.")]

