"""Shared pieces of the CLI: consoles, the debug flag, JSON output, option types."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


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


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def spec_path(path: Path) -> Path:
    """Accept a spec file or a folder containing ``kiln.toml``."""
    return path / "kiln.toml" if path.is_dir() else path
