"""`kiln base bootstrap`: make a base image offline (debootstrap + import), cached by tag."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.markup import escape

from torchkiln.building.bootstrap import DEFAULT_PACKAGES, DEFAULT_SUITE, BaseRequest, base_store, bootstrap
from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, human_size, print_json
from torchkiln.cli.build import StepDisplay, live_output, make_runner
from torchkiln.cli.config import engine_setting
from torchkiln.engines import get_engine

Platform = Literal["linux/amd64", "linux/arm64"]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="docker or podman (default: "
        "KILN_ENGINE or the kiln config engine, else the first usable)."),
]

base_app = typer.Typer(
    name="base",
    help="Base images without a registry: bootstrap a Debian/Ubuntu root with Python and import it.",
    no_args_is_help=True,
)
app.add_typer(base_app, name="base")


@base_app.command("bootstrap")
def bootstrap_cmd(
    suite: Annotated[str, typer.Option("--suite", help="Debian or Ubuntu suite (bookworm, trixie, noble, …).")] = (
        DEFAULT_SUITE
    ),
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror", help="Archive mirror URL (default: from this host's apt sources, else debootstrap's)."
        ),
    ] = None,
    package: Annotated[
        list[str] | None,
        typer.Option("--package", "-p", help="Extra Debian package to include (repeatable); python3 always is."),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option("--tag", "-t",
                     help="Image reference (default: kiln-base:SUITE, kiln-base:SUITE-arm64 for arm64)."),
    ] = None,
    platform: Annotated[
        Platform,
        typer.Option("--platform", help="The base's platform: linux/arm64 makes an arm64 root (Grace systems); on "
                                        "an x86_64 host that runs under qemu-user-static (binfmt_misc)."),
    ] = "linux/amd64",
    engine_name: EngineOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the tag exists.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every line debootstrap prints.")] = False,
    json: JsonOpt = False,
) -> None:
    """Create a minimal base image (debootstrap --variant=minbase + python3) in the engine's store.

    Nothing is pulled from a registry; packages come from the Debian/Ubuntu archive mirror. The
    image is cached by its tag: run again and it returns at once (use --force to rebuild).
    Build on it with `kiln build SPEC --base kiln-base:bookworm` or `\\[base] image` in kiln.toml; an arm64
    plan builds on kiln-base:bookworm-arm64 instead (`--platform linux/arm64` here makes it).
    """
    packages = tuple(dict.fromkeys([*DEFAULT_PACKAGES, *(package or [])]))
    request = BaseRequest(suite=suite, mirror=mirror, packages=packages, tag=tag, platform=platform)
    runner = make_runner()
    # apptainer has no store: refused before any work
    engine = base_store(get_engine(engine_setting(engine_name), runner))
    if not json:
        err_console.print(
            f"bootstrapping {escape(request.image)} ({suite}, {platform}, {', '.join(packages)}) into {engine.name}",
            highlight=False,
        )
    with StepDisplay(live=live_output() and not json, verbose=verbose) as display:
        result = bootstrap(engine, request, runner=runner, force=force, on_line=display.line)
    if json:
        print_json(result.to_dict())
        return
    how = "already there (cached)" if not result.created else f"created in {result.seconds:.0f} s"
    console.print(
        f"[bold green]{escape(result.image)}[/bold green] {how}: {result.platform}, Python {result.python or '?'}, "
        f"{human_size(result.size)}, {engine.name}",
        highlight=False,
    )
    console.print(f"build on it: kiln build SPEC --base {result.image}", highlight=False)
