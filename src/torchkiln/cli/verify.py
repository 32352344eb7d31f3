"""`kiln verify IMAGE` / `kiln verify --here`: run torchkiln's GPU checks and report them.

The report goes to stdout (a table, or JSON with ``--json``); progress to stderr. Exit codes: 0
every check passed or was skipped, 1 a check failed, 8 no CUDA device was visible; the usual codes
for a missing image (7) or engine (5).

``--record-first-run FILE`` runs the first-run recorder (``verify/firstrun.py``) instead of the checks
and writes the files it read as ctr-remote's record (``verify/record.py``), for ``kiln push
--compression estargz --first-run FILE``; exit 0 when written, 7 when the first run failed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, print_json
from torchkiln.cli.build import make_runner, missing_image
from torchkiln.cli.config import engine_setting
from torchkiln.engines import Engine, get_engine_for, output_of
from torchkiln.errors import InputError
from torchkiln.verify.checks import CHECK_NAMES
from torchkiln.verify.report import VerifyReport, render_report
from torchkiln.verify.runner import (
    DEFAULT_TIMEOUT,
    FirstRun,
    VerifyOptions,
    image_spec,
    is_sif_path,
    record_here,
    record_image,
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
    return get_engine_for(engine_setting(name), runner, sif_file=is_sif_path(image))


def _spec_payload(spec: Path, engine_name: str | None) -> tuple[dict[str, Any], str]:
    """(what checks.py --spec-json takes, the image the spec builds: a .sif path with apptainer)."""
    from torchkiln.building.invocation import image_for
    from torchkiln.contract import verify_spec
    from torchkiln.load import load_plan

    _spec, plan, spec_dir = load_plan(spec)
    return verify_spec(plan), image_for(output_of(engine_setting(engine_name)), plan,
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
                                      "KILN_ENGINE or the kiln config engine, else the first usable)."),
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
    record_first_run: Annotated[
        Path | None,
        typer.Option("--record-first-run", metavar="FILE",
                     help="Instead of the checks, record the files a first run reads (import torch, a matmul, a "
                          "cuDNN conv, SDPA; on the CPU without a GPU) and write them to FILE as ctr-remote's "
                          "record, for `kiln push IMAGE --compression estargz --first-run FILE`.",
                     dir_okay=False, show_default=False),
    ] = None,
    imports: Annotated[
        list[str] | None,
        typer.Option("--import", metavar="MODULES",
                     help="With --record-first-run: modules to import after torch (comma-separated), so that "
                          "the app's own first imports are placed first too."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Run torchkiln's checks on a real GPU: CUDA, driver, arch coverage of torch and of every compiled
    extension, numerics, bf16 throughput, NCCL across all GPUs, and the spec's extensions.

    Examples: kiln verify acme/trainer:latest · kiln verify trainer.sif (apptainer exec --nv) ·
    kiln verify --spec kiln.toml · kiln verify --spec kiln.toml --engine apptainer (the .sif kiln build
    wrote) · kiln verify --here --json · kiln verify IMAGE --record-first-run first-run.json
    """
    if here and image:
        raise typer.BadParameter("give an IMAGE or --here, not both", param_hint="--here")
    if here and engine_name:
        raise typer.BadParameter("--here runs no engine", param_hint="--engine")
    if here and not gpus:
        raise typer.BadParameter("--no-gpus is for images; --here uses whatever this machine has",
                                 param_hint="--no-gpus")
    modules = tuple(m.strip() for v in imports or [] for m in v.split(",") if m.strip())
    if record_first_run is not None:
        for given, option in ((only, "--only"), (skip, "--skip"), (matmul_size, "--matmul-size")):
            if given:
                raise typer.BadParameter("--record-first-run runs no checks", param_hint=option)
        _check_destination(record_first_run)  # before the run, not after it
    elif modules:
        raise typer.BadParameter("--import is for --record-first-run", param_hint="--import")
    payload: dict[str, Any] | None = None
    spec_image = None
    if spec is not None:
        payload, spec_image = _spec_payload(spec, engine_name)
    options = VerifyOptions(spec=payload, only=_names(only, "--only"), skip=_names(skip, "--skip"),
                            matmul_size=matmul_size, python=python, timeout=timeout, gpus=gpus)
    if here:
        if record_first_run is not None:
            with err_console.status("recording a first run in this Python environment…"):
                recorded = record_here(options, make_runner(), modules)
            _write_first_run(recorded, record_first_run, None, json)
            return
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
        if record_first_run is not None:
            recorded = _record_in_image(target, engine, options, modules, attached)
            _write_first_run(recorded, record_first_run, target, json)
            return
        with err_console.status(f"running the checks in {escape(target)} with {engine.name} ({attached})…"):
            report = verify_image(target, engine, options)
    _output(report, json)
    raise typer.Exit(int(report.exit_code))


def _check_destination(dest: Path) -> None:
    from torchkiln.errors import FilesError
    from torchkiln.fsio import check_writable_target

    check_writable_target(dest, what="first-run record")
    folder = dest.parent if str(dest.parent) else Path(".")
    if not folder.is_dir():
        raise FilesError(f"the folder of {dest} does not exist; the first-run record cannot be written there.",
                         hint=f"Create it (mkdir -p {folder}) or give another path.")


def _record_in_image(target: str, engine: Engine, options: VerifyOptions, modules: tuple[str, ...],
                     attached: str) -> FirstRun:
    """Record in ``target``; where the engine cannot attach GPUs, record without them (a CPU run)."""
    from torchkiln.errors import NoGPUError

    try:
        with err_console.status(f"recording a first run in {escape(target)} with {engine.name} ({attached})…"):
            return record_image(target, engine, options, modules)
    except NoGPUError as e:
        if not options.gpus:
            raise
        err_console.print(f"[yellow]warning:[/yellow] {escape(e.message)} Recording without GPUs (a CPU run).",
                          highlight=False)
    with err_console.status(f"recording a first run in {escape(target)} with {engine.name} (no GPUs)…"):
        return record_image(target, engine, dataclasses.replace(options, gpus=False), modules)


def _write_first_run(recorded: FirstRun, dest: Path, image: str | None, json: bool) -> None:
    """Write the record (atomically) and say what it holds and what to run next."""
    import shlex

    from torchkiln.verify.record import write_record

    write_record(dest, recorded.files)
    push = shlex.join(["kiln", "push", image or "IMAGE", "--compression", "estargz", "--first-run", str(dest)])
    if json:
        print_json({"record": str(dest), "image": image, "files": len(recorded.files), "bytes": recorded.bytes,
                    "device": recorded.device, "gpu": recorded.gpu, "torch": recorded.torch,
                    "kernels": list(recorded.kernels), "gpu_kernels_run": recorded.device == "cuda",
                    "next": push})
        return
    console.print(f"recorded {len(recorded.files):,} files ({recorded.mib:,.1f} MiB) a first run reads "
                  f"(device: {recorded.device}) → {escape(str(dest))}", highlight=False)
    if recorded.device != "cuda":
        console.print("[yellow]no CUDA device: GPU kernels were not run[/yellow]; the record holds what import "
                      "torch and CPU kernels read (the CUDA libraries torch loads on first use are not in it). "
                      "Record on a GPU machine for a full one.", highlight=False)
    console.print(f"next: {escape(push)}", highlight=False)


def _output(report: VerifyReport, json: bool) -> None:
    if json:
        print_json(report.to_dict())
        return
    render_report(report, console)
