"""`kiln export`: a built image as a docker-archive, an OCI archive, or a .sif (no apptainer needed)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, human_size, print_json, state
from torchkiln.cli.config import engine_setting
from torchkiln.engines import get_engine, require_store
from torchkiln.images.export import ExportFormat, export_image
from torchkiln.runner import Runner


def _runner() -> Runner:
    if state.debug:
        return Runner(echo=lambda cmd: err_console.print(f"[dim]$ {escape(cmd)}[/dim]", highlight=False))
    return Runner()


@app.command("export")
def export_cmd(
    image: Annotated[str, typer.Argument(help="The image to export (name:tag or id), as the engine knows it.",
                                         show_default=False)],
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", help="docker-archive, oci-archive, or sif (a SIF file written directly)."),
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="The file to write.", show_default=False)],
    engine: Annotated[
        str | None, typer.Option("--engine", help="docker or podman (default: "
            "KILN_ENGINE or the kiln config engine, else the first usable).")
    ] = None,
    processors: Annotated[
        int | None, typer.Option("--processors", min=1, help="sif: CPUs mksquashfs may use (default: all).")
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Write a built image to a file for sites that run Apptainer.

    docker-archive and oci-archive print the exact `apptainer build` command that turns the file
    into a .sif on the cluster; sif writes the .sif here (flattened layers, apptainer's
    /.singularity.d layout, squashfs via mksquashfs), so no apptainer is needed on this machine.
    """
    runner = _runner()
    eng = require_store(get_engine(engine_setting(engine), runner), "save an image as a docker-archive",
                        "A .sif is already a file: copy it. To get archives, build with docker or podman and use "
                        "`kiln export IMAGE --format docker-archive|oci-archive`.")
    say = None if json else (lambda msg: err_console.print(f"[dim]{escape(msg)}[/dim]", highlight=False))
    result = export_image(image, fmt, out, engine=eng, runner=runner, processors=processors, progress=say)
    if json:
        print_json(result.to_dict())
        return
    console.print(f"wrote {escape(str(result.path))} ({fmt}, {human_size(result.size)}, {result.layers} layers) "
                  f"in {result.seconds:.1f} s")
    if result.apptainer_command:
        console.print("turn it into a .sif where apptainer is installed:")
        console.print(f"  {escape(result.apptainer_command)}")
    else:
        q = shlex.quote(str(result.path))
        console.print(f"run it: apptainer run --nv {escape(q)}   (check it: kiln verify {escape(q)})")
