"""`kiln render`: write the Dockerfile and build context of a spec (or its Apptainer definition)."""

from __future__ import annotations

import errno
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import typer

from torchkiln.building.context import bake_context, ensure_uv, write_apptainer_context, write_context
from torchkiln.building.emulation import host_platform
from torchkiln.building.options import ApptainerOptions
from torchkiln.cli import app
from torchkiln.cli._common import BuilderFromOpt, FromOpt, JsonOpt, console, print_json
from torchkiln.cli._matrix import SkipImpossibleOpt, refuse_impossible
from torchkiln.cli.config import with_base_setting
from torchkiln.contract import sif_name
from torchkiln.errors import KilnError, OutputError
from torchkiln.load import load_matrix, load_plan
from torchkiln.plan import BuildPlan
from torchkiln.render import render_dockerfile
from torchkiln.render.apptainer import (
    DEFFILE,
    REGISTRY_BOOTSTRAP,
    Bootstrap,
    render_apptainer,
)

Format = Literal["dockerfile", "apptainer", "bake"]


def _written(write: Callable[[], list[Path]], out: Path) -> list[Path]:
    """Run ``write``; an OS error (a read-only or missing parent, a full disk) is an error, not a traceback."""
    try:
        return write()
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # a full disk: exit 10 with a fix about space (the CLI boundary), nothing left half-written
        where = f" ({e.filename})" if e.filename else ""
        raise OutputError(f"cannot write the build context to {out}: {e.strerror or e}{where}.",
                          hint="Give -o a folder in a place you can write to (it is created, or replaced "
                          "whole when torchkiln wrote it).") from None


@app.command("render")
def render_cmd(
    spec: Annotated[Path, typer.Argument(
        help="A kiln.toml, a pyproject.toml with \\[tool.kiln], or a project folder.", show_default=False)],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write the whole build context into this folder.")
    ] = None,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print the Dockerfile instead of writing files.")] = False,
    fmt: Annotated[
        Format, typer.Option("--format", help="dockerfile, apptainer (a definition file, kiln.def, for HPC sites), or "
                                              "bake: the spec's \\[matrix] as a docker buildx bake file with a "
                                              "context per cell (docs/matrix.md).")
    ] = "dockerfile",
    bootstrap: Annotated[
        Bootstrap,
        typer.Option("--bootstrap", help="apptainer: where the base image comes from (docker pulls it; "
                     "docker-daemon, docker-archive, oci-archive and localimage work offline)."),
    ] = "docker",
    from_: FromOpt = None,
    builder_from: BuilderFromOpt = None,
    skip_impossible: SkipImpossibleOpt = False,
    json: JsonOpt = False,
) -> None:
    """Render the spec's multi-stage Dockerfile (runtime and dev targets) and its build context.

    With --format apptainer: an Apptainer definition file instead, with the files its %files needs.
    Same spec, same bytes: the output is deterministic. Nothing is written unless all of it is.
    """
    if fmt == "bake":
        _render_bake(spec, out, stdout, skip_impossible, json)
        return
    _spec, plan, spec_dir = load_plan(spec)
    plan = with_base_setting(plan, spec)
    if fmt == "apptainer":
        _render_apptainer(plan, spec_dir, out, stdout, ApptainerOptions(bootstrap, from_, builder_from), json)
        return
    if stdout or out is None:
        if out is None and not stdout:
            console.print("[dim]# no -o/--out given: printing the Dockerfile[/dim]", highlight=False)
        print(render_dockerfile(plan), end="")
        return
    if out.exists() and not out.is_dir():
        raise KilnError(f"{out} exists and is not a folder.", hint="Give a folder path to -o.")
    _fetch_foreign_uv([plan], spec_dir)
    files = _written(lambda: write_context(plan, spec_dir, out), out)
    if json:
        print_json({"out": str(out), "files": [str(f.relative_to(out.resolve())) for f in files]})
        return
    console.print(f"wrote the build context of {plan.image_ref} to {out} ({len(files)} files)")
    console.print(f"build it with: kiln build {spec}   (or DOCKER_BUILDKIT=1 docker build --target runtime {out})")


def _fetch_foreign_uv(plans: list[BuildPlan], spec_dir: Path) -> None:
    """A context for another CPU than this machine's carries uv built for that CPU: fetch it once per platform
    (through the plan's package sources, or this machine's pip configuration)."""
    todo = {p.platform: p for p in plans if p.platform != host_platform()}
    if not todo:
        return
    from torchkiln.building.sources import resolve_sources
    from torchkiln.runner import Runner

    runner = Runner()
    for platform, plan in sorted(todo.items()):
        found = resolve_sources(plan_sources=plan.sources, spec_dir=spec_dir, from_pip=True, runner=runner)
        ensure_uv(platform, found, runner)


def _render_apptainer(
    plan: BuildPlan, spec_dir: Path, out: Path | None, stdout: bool, options: ApptainerOptions, as_json: bool
) -> None:
    if stdout or out is None:
        if out is None and not stdout:
            console.print("[dim]# no -o/--out given: printing the definition file[/dim]", highlight=False)
        print(render_apptainer(plan, options), end="")
        return
    if out.exists() and not out.is_dir():
        raise KilnError(f"{out} exists and is not a folder.", hint="Give a folder path to -o.")
    files = _written(lambda: write_apptainer_context(plan, spec_dir, out, options), out)
    sif = sif_name(plan)
    if as_json:
        print_json({"out": str(out), "deffile": str(out / DEFFILE), "sif": sif,
                    "files": [str(f.relative_to(out.resolve())) for f in files]})
        return
    console.print(f"wrote the Apptainer definition of {plan.image_ref} to {out / DEFFILE} ({len(files)} files)")
    offline = "" if options.bootstrap == REGISTRY_BOOTSTRAP else f" --bootstrap {options.bootstrap}" + "".join(
        f" {flag} {shlex.quote(value)}" for flag, value in (("--from", options.source),
                                                             ("--builder-from", options.builder_source)) if value)
    console.print(f"build it with: kiln build {spec_dir} --engine apptainer{offline}   "
                  f"(or: cd {out} && apptainer build --fakeroot {sif} {DEFFILE})", highlight=False)


def _render_bake(spec: Path, out: Path | None, stdout: bool, skip: bool, as_json: bool) -> None:
    from torchkiln.render.bake import BAKE_FILE, render_bake

    _s, cells, spec_dir = load_matrix(spec)
    cells = refuse_impossible(cells, skip)
    if stdout or out is None:
        if out is None and not stdout:
            console.print("[dim]# no -o/--out given: printing the bake file (its contexts need -o)[/dim]",
                          highlight=False)
        print(render_bake(cells), end="")
        return
    if out.exists() and not out.is_dir():
        raise KilnError(f"{out} exists and is not a folder.", hint="Give a folder path to -o.")
    _fetch_foreign_uv([rc.plan for rc in cells if rc.plan is not None], spec_dir)
    files = _written(lambda: bake_context(cells, spec_dir).write(out), out)
    if as_json:
        print_json({"out": str(out), "bake_file": str(out / BAKE_FILE), "targets": len(cells),
                    "files": [str(f.relative_to(out.resolve())) for f in files]})
        return
    console.print(f"wrote a bake file for {len(cells)} cells to {out / BAKE_FILE} with a build context per cell")
    console.print(f"build them with: cd {out} && docker buildx bake   (or: kiln build {spec} --matrix --builders "
                  "default)", highlight=False)
