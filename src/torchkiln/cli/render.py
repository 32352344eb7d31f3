"""`kiln render`: write the Dockerfile and build context of a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json
from torchkiln.cli._load import load_plan
from torchkiln.errors import KilnError
from torchkiln.render import render_dockerfile, write_context

Format = Literal["dockerfile"]


@app.command("render")
def render_cmd(
    spec: Annotated[Path, typer.Argument(help="A kiln.toml (or a folder holding one).", show_default=False)],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write the whole build context into this folder.")
    ] = None,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print the Dockerfile instead of writing files.")] = False,
    json: JsonOpt = False,
) -> None:
    """Render the spec's multi-stage Dockerfile (runtime and dev targets) and its build context.

    Same spec, same bytes: the output is deterministic. Nothing is written unless all of it is.
    """
    _spec, plan, spec_dir = load_plan(spec)
    if stdout or out is None:
        if out is None and not stdout:
            console.print("[dim]# no -o/--out given: printing the Dockerfile[/dim]", highlight=False)
        print(render_dockerfile(plan), end="")
        return
    if out.exists() and not out.is_dir():
        raise KilnError(f"{out} exists and is not a folder.", hint="Give a folder path to -o.")
    files = write_context(plan, spec_dir, out)
    if json:
        print_json({"out": str(out), "files": [str(f.relative_to(out.resolve())) for f in files]})
        return
    console.print(f"wrote the build context of {plan.image_ref} to {out} ({len(files)} files)")
    console.print(f"build it with: kiln build {spec}   (or DOCKER_BUILDKIT=1 docker build --target runtime {out})")
