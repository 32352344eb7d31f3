"""`kiln verify IMAGE` / `kiln verify --here`: run torchkiln's GPU checks and report them.

The report goes to stdout (a table, or JSON with ``--json``); progress to stderr. Exit codes: 0
every check passed or was skipped, 1 a check failed, 8 no CUDA device was visible; the usual codes
for a missing image (7) or engine (5).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, print_json
from torchkiln.cli.build import make_runner, missing_image
from torchkiln.engines import Engine, get_engine_for, output_of
from torchkiln.errors import InputError
from torchkiln.verify.checks import CHECK_NAMES
from torchkiln.verify.report import VerifyReport, render_report
from torchkiln.verify.runner import (
    DEFAULT_TIMEOUT,
    VerifyOptions,
    image_spec,
    is_sif_path,
    verify_here,
    verify_image,
)


def _names(values: list[str] | None, option: str) -> tuple[str, ...]:
    names = tuple(n.strip() for v in values or [] for n in v.split(",") if n.strip())
    unknown = sorted(set(names) - set(CHECK_NAMES))
    if unknown:
        raise typer.BadParameter(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}",
                                 param_hint=option)
    return names


def _engine_for(image: str, name: str | None) -> Engine:
    runner = make_runner()
    return get_engine_for(name, runner, sif_file=is_sif_path(image))


def _spec_payload(spec: Path, engine_name: str | None) -> tuple[dict[str, Any], str]:
    """(what checks.py --spec-json takes, the image the spec builds: a .sif path with apptainer)."""
    from torchkiln.building.invocation import image_for
    from torchkiln.contract import verify_spec
    from torchkiln.load import load_plan

    _spec, plan, spec_dir = load_plan(spec)
    return verify_spec(plan), image_for(output_of(engine_name or os.environ.get("KILN_ENGINE")), plan,
                                        spec_dir.resolve())


@app.command("verify")
def verify_cmd(
    image: Annotated[
        str | None,
        typer.Argument(
            help="The image to check: a docker/podman image reference or a .sif file. Default: the image "
                 "--spec builds.",
            show_default=False,
        ),
    ] = None,
    here: Annotated[
        bool, typer.Option("--here", help="Check the current Python environment on this machine instead of an image.")
    ] = False,
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="A kiln.toml: its CUDA, driver floor and extensions are checked (and its "
                                    "image is the default IMAGE)."),
    ] = None,
    engine_name: Annotated[
        str | None,
        typer.Option("--engine", help="docker, podman or apptainer (default: apptainer for .sif files, else "
                                      "KILN_ENGINE, else the first usable)."),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option("--python", help="The interpreter that runs the checks: in the image (default python3) or, "
                                      "with --here, on this machine (default: the one running kiln)."),
    ] = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Run only these checks (comma-separated).")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Leave these checks out (comma-separated).")] = None,
    matmul_size: Annotated[
        int | None, typer.Option("--matmul-size", min=256, help="Size n of the n×n×n bf16 throughput matmul (8192).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=10, help="Give up after this many seconds.")
    ] = DEFAULT_TIMEOUT,
    gpus: Annotated[
        bool,
        typer.Option("--gpus/--no-gpus", help="Attach every GPU to the container (default). --no-gpus only "
                                              "smoke-tests the image on a build host: it reports no CUDA device."),
    ] = True,
    json: JsonOpt = False,
) -> None:
    """Run torchkiln's checks on a real GPU: CUDA, driver, arch coverage of torch and of every compiled
    extension, numerics, bf16 throughput, NCCL across all GPUs, and the spec's extensions.

    Examples: kiln verify acme/trainer:latest · kiln verify trainer.sif (apptainer exec --nv) ·
    kiln verify --spec kiln.toml · kiln verify --spec kiln.toml --engine apptainer (the .sif kiln build
    wrote) · kiln verify --here --json
    """
    if here and image:
        raise typer.BadParameter("give an IMAGE or --here, not both", param_hint="--here")
    if here and engine_name:
        raise typer.BadParameter("--here runs no engine", param_hint="--engine")
    if here and not gpus:
        raise typer.BadParameter("--no-gpus is for images; --here uses whatever this machine has",
                                 param_hint="--no-gpus")
    payload: dict[str, Any] | None = None
    spec_image = None
    if spec is not None:
        payload, spec_image = _spec_payload(spec, engine_name)
    options = VerifyOptions(spec=payload, only=_names(only, "--only"), skip=_names(skip, "--skip"),
                            matmul_size=matmul_size, python=python, timeout=timeout, gpus=gpus)
    if here:
        with err_console.status("running the checks in this Python environment…"):
            report = verify_here(options, make_runner())
    else:
        target = image or spec_image
        if target is None:
            raise InputError("nothing to verify: give an IMAGE, --spec kiln.toml, or --here.",
                             hint="kiln verify IMAGE (docker/podman reference or .sif) · kiln verify --here")
        engine = _engine_for(target, engine_name)
        labels_spec = None
        if payload is None:
            labels_spec, carried = image_spec(engine, target)
            options = dataclasses.replace(options, spec=None if carried else labels_spec, spec_in_image=carried)
        elif not engine.image_exists(target):
            assert spec is not None  # payload comes from --spec
            raise missing_image(target, engine.name, spec)
        if not is_sif_path(target) and ((options.spec or {}).get("forward_compat")
                                        or (payload is None and (labels_spec or {}).get("forward_compat"))):
            from torchkiln.resolve.compat import ENTRYPOINT

            options = dataclasses.replace(options, through=ENTRYPOINT)  # the image's own cuda-compat switch
        attached = "GPUs attached" if gpus else "no GPUs"
        with err_console.status(f"running the checks in {escape(target)} with {engine.name} ({attached})…"):
            report = verify_image(target, engine, options)
    _output(report, json)
    raise typer.Exit(int(report.exit_code))


def _output(report: VerifyReport, json: bool) -> None:
    if json:
        print_json(report.to_dict())
        return
    render_report(report, console)
