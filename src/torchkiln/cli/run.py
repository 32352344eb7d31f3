"""`kiln run SPEC -- CMD`: run a command in the image a spec builds (the same engine, removed after).

With ``--engine apptainer`` the image is the ``.sif`` `kiln build --engine apptainer` wrote (next to
the spec, or ``--tag PATH.sif``), run with ``apptainer exec`` (``apptainer run`` without a command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from torchkiln.building.invocation import image_for
from torchkiln.cli import app
from torchkiln.cli.build import EngineOpt, Target, make_runner, missing_image
from torchkiln.cli.config import engine_setting
from torchkiln.engines import Mount, RunRequest, get_engine
from torchkiln.errors import InputError
from torchkiln.load import load_plan


def _parse_env(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key or not sep:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-e/--env")
        out[key] = value
    return out


def _parse_mount(item: str) -> Mount:
    parts = item.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise typer.BadParameter(f"{item!r} is not HOST_PATH:CONTAINER_PATH[:ro|rw]", param_hint="-v/--volume")
    source = Path(parts[0]).resolve()
    if not source.exists():
        raise InputError(f"{source} does not exist (from -v {item}).", hint="Give an existing host path.")
    return Mount(source, parts[1], read_only=len(parts) == 3 and parts[2] == "ro")


@app.command("run")
def run_cmd(
    spec: Annotated[Path, typer.Argument(
        help="A kiln.toml, a pyproject.toml with \\[tool.kiln], or a project folder.", show_default=False)],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The command to run (after `--`); default: the image's CMD.", show_default=False),
    ] = None,
    target: Annotated[Target, typer.Option("--target", help="Which built image: runtime or dev.")] = "runtime",
    engine_name: EngineOpt = None,
    tag: Annotated[
        str | None,
        typer.Option("--tag", "-t", help="Run this image reference instead of the spec's (apptainer: a .sif path)."),
    ] = None,
    gpus: Annotated[
        bool, typer.Option("--gpus", help="Attach all GPUs (docker --gpus all, podman CDI, apptainer --nv).")
    ] = False,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE (repeatable).")] = None,
    volume: Annotated[
        list[str] | None, typer.Option("--volume", "-v", help="HOST:CONTAINER[:ro] (repeatable).")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Run as this user instead of the image's.")] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive/--no-interactive", "-i", help="Keep stdin open (and a TTY on a terminal).")
    ] = True,
) -> None:
    """Run a command in the spec's built image; exits with the command's exit code. A command given
    replaces the image's command and its \\[app] entrypoint; none runs the image as it starts.

    Example: kiln run examples/cpu.toml -- python -c "import torch; print(torch.__version__)"
    """
    _spec, plan, spec_dir = load_plan(spec)
    engine = get_engine(engine_setting(engine_name), make_runner())
    ref = image_for(engine.info.output, plan, spec_dir.resolve(), target, tag)
    if not engine.image_exists(ref):
        raise missing_image(ref, engine.name, spec, target, tag)
    # a command replaces the spec's [app] entrypoint too (the help's promise: it runs the command given);
    # forward compatibility's own entrypoint stays in front of it
    entrypoint = None
    if command and plan.app.entrypoint and target == "runtime":
        entrypoint = ""
        if plan.cuda_compat and plan.torch.cuda is not None:
            from torchkiln.resolve.compat import ENTRYPOINT

            entrypoint = ENTRYPOINT
    result = engine.run_request(RunRequest(
        ref,
        tuple(command or []),
        entrypoint=entrypoint,
        gpus=gpus,
        mounts=tuple(_parse_mount(v) for v in volume or []),
        env=_parse_env(env or []),
        user=user,
        passthrough=True,
        interactive=interactive,
    ), check=False)
    raise typer.Exit(result.returncode)
