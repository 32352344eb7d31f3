"""`kiln build`: resolve → render → build with a real engine → tag → summary.

Progress goes to stderr: live (rich) on a terminal, one plain line per finished step otherwise (CI,
pipes). The summary goes to stdout, as JSON with ``--json``. With ``--engine apptainer`` the image
is a ``.sif`` file (see ``torchkiln.building.execute``). ``--dry-run`` prints the ``BuildInvocation`` the
build would run (``torchkiln.building.invocation``).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from torchkiln.building.execute import BuildSummary, execute
from torchkiln.building.invocation import BuildInvocation, BuildOptions, plan_spec
from torchkiln.building.options import ApptainerOptions
from torchkiln.building.sources import layer_from_flags
from torchkiln.cli import app
from torchkiln.cli._common import (
    BuilderFromOpt,
    ExtraIndexUrlOpt,
    FindLinksOpt,
    FromOpt,
    IndexUrlOpt,
    JsonOpt,
    TorchIndexOpt,
    console,
    duration,
    err_console,
    host_resources,
    human_size,
    print_json,
    state,
)
from torchkiln.cli._matrix import MatrixOpt, SkipImpossibleOpt
from torchkiln.cli.config import command_settings
from torchkiln.engines import BuildEvent, StepRecord, get_engine, output_of
from torchkiln.errors import ExitCode, InputError, KilnError
from torchkiln.estimate import BuildEstimate, estimate_builds
from torchkiln.knowledge import load_knowledge
from torchkiln.load import load_plan
from torchkiln.plan import BuildPlan
from torchkiln.render.apptainer import REGISTRY_BOOTSTRAP, Bootstrap
from torchkiln.runner import Runner
from torchkiln.settings import user_source_layer

Target = Literal["runtime", "dev"]
Platform = Literal["linux/amd64", "linux/arm64"]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="docker or podman (default: "
        "KILN_ENGINE or the kiln config engine, else the first usable), or apptainer "
                                  "for a .sif (HPC sites; used only when named here or in KILN_ENGINE)."),
]


def make_runner() -> Runner:
    """The runner every command uses: echoes each subprocess with --debug."""
    if state.debug:
        return Runner(echo=lambda cmd: err_console.print(f"[dim]$ {escape(cmd)}[/dim]", highlight=False))
    return Runner()


def live_output() -> bool:
    """Live progress only on an interactive terminal outside CI."""
    return err_console.is_terminal and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


class StepDisplay:
    """Shows build progress: finished steps as lines, the running one live (terminal only)."""

    def __init__(self, *, live: bool, verbose: bool) -> None:
        self.verbose = verbose
        self.live: Live | None = Live(console=err_console, transient=True, refresh_per_second=8) if live else None
        self.current = ""
        self.last_line = ""
        self.phases: set[str] = set()
        self.started = time.monotonic()

    def __enter__(self) -> StepDisplay:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def _status(self) -> Text:
        t = Text()
        t.append(f"⠿ {time.monotonic() - self.started:5.0f}s ", style="cyan")
        t.append(self.current[:100])
        if self.last_line:
            t.append("\n    " + self.last_line[:120], style="dim")
        return t

    def event(self, ev: BuildEvent) -> None:
        title = StepRecord(ev.step, ev.stage, ev.name).label
        internal = ev.stage in ("internal", "export", "auth", "")
        if ev.status == "running":
            if ev.line is None:
                self.current = f"[{ev.stage}] {title}"
                self.last_line = ""
            else:
                self.last_line = ev.line
                if self.verbose:
                    err_console.print(f"    {escape(ev.line)}", highlight=False, style="dim")
            if self.live is not None:
                self.live.update(self._status())
            return
        if internal and ev.status != "error" and not self.verbose:
            return
        secs = f"{ev.seconds:.1f}s" if ev.seconds else ""
        mark = {"cached": "[green]cached[/green]", "done": "[blue]done[/blue]", "error": "[bold red]FAILED[/bold red]"}
        err_console.print(
            f"  {mark.get(ev.status, ev.status)} {secs:>7} [bold]\\[{escape(ev.stage)}][/bold] {escape(title)}",
            highlight=False,
        )

    def line(self, text: str) -> None:
        """A raw output line (debootstrap): live status on a terminal; otherwise warnings, errors and
        one line per phase (debootstrap's "I: Retrieving …" is ~500 lines of one per package)."""
        self.last_line = text
        if self.live is not None:
            self.live.update(self._status())
            return
        phase = text.split()[1] if text.startswith("I: ") and len(text.split()) > 1 else None
        # each phase once: debootstrap interleaves "Retrieving x" / "Validating x" for every package
        if self.verbose or text.startswith(("W: ", "E: ")) or (phase is not None and phase not in self.phases):
            err_console.print(escape(text if self.verbose or phase is None else f"I: {phase} …"), highlight=False)
        if phase is not None:
            self.phases.add(phase)


def missing_image(
    ref: str, engine_name: str, spec: Path, target: str = "runtime", tag: str | None = None
) -> InputError:
    """The error for a spec's image that was never built, with the `kiln build` command that builds it."""
    sif = output_of(engine_name) == "sif"
    again = (f" --target {target}" if target != "runtime" else "") + (f" --engine {engine_name}" if sif else "")
    where = "" if sif else f" in {engine_name}"  # a .sif is a file, in no store
    return InputError(
        f"the image {ref} does not exist{where}.",
        hint=f"Build it first: kiln build {spec}{again}" + (f" --tag {tag}" if tag else ""),
    )


def engine_label(info: dict[str, str]) -> str:
    """``docker 27.3.1``; apptainer has no server: its client's own name and version (``apptainer 1.3.4``)."""
    return f"{info['name']} {info['server_version']}" if info["server_version"] else info["client_version"]


def print_summary(summary: BuildSummary, spec: Path, tag: str | None = None) -> None:
    e = summary.engine
    sif = output_of(e["name"]) == "sif"
    console.print(
        f"[bold green]built[/bold green] {escape(summary.image)} ({summary.target}) with {escape(engine_label(e))} "
        f"({e['builder']}) in {summary.seconds:.1f} s",
        highlight=False,
    )
    if sif:
        console.print(
            f"  size {human_size(summary.size_bytes)} · one squashfs partition · base {escape(summary.base_image)} · "
            f"squashfs {summary.export_seconds:.1f} s",
            highlight=False,
        )
    else:
        console.print(
            f"  size {human_size(summary.size_bytes)} · {summary.layers} layers · "
            f"cache: {summary.cache_hits} steps reused, {summary.cache_misses} rebuilt · "
            f"export {summary.export_seconds:.1f} s",
            highlight=False,
        )
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("stage")
    table.add_column("time", justify="right")
    table.add_column("steps", justify="right")
    if not sif:  # apptainer caches base layers, not build steps
        table.add_column("cached", justify="right")
    for s in summary.stages:
        table.add_row(s.name, f"{s.seconds:.1f}s", str(s.steps), *([] if sif else [str(s.cached)]))
    console.print(table)
    if summary.pushed:
        console.print(f"  pushed {summary.image}")
    if summary.cache_to:
        console.print(f"  build cache pushed to {escape(summary.cache_to)}", highlight=False)
    if summary.sbom:
        console.print(f"  SBOM (CycloneDX) {escape(summary.sbom)} · `kiln inspect {escape(summary.image)}` shows it",
                      highlight=False)
    target = "" if summary.target == "runtime" else f" --target {summary.target}"
    if sif:
        image = shlex.quote(summary.image)
        where = f" --tag {image}" if tag else ""  # the default .sif is found from the spec
        console.print(
            f"run it: kiln run {spec} --engine apptainer{where} -- python -c 'import torch; print(torch.__version__)'",
            highlight=False,
        )
        console.print(f"  or on a GPU node: apptainer run --nv {image} · check it: kiln verify {image}",
                      highlight=False)
        return
    console.print(
        f"run it: kiln run {spec}{target} -- python -c 'import torch; print(torch.__version__)'", highlight=False
    )


@app.command("build")
def build_cmd(
    spec: Annotated[Path, typer.Argument(
        help="A kiln.toml, a pyproject.toml with \\[tool.kiln], or a project folder (docs/project.md).",
        show_default=False)],
    target: Annotated[
        Target, typer.Option("--target", help="Stage to build: the slim runtime or dev (apptainer: runtime only).")
    ] = "runtime",
    engine_name: EngineOpt = None,
    base: Annotated[
        str | None,
        typer.Option("--base", help="Build on this base image instead of the plan's (e.g. kiln-base:bookworm; "
                                    "default: KILN_BASE, else \\[base] image, else the base setting, `kiln config`)."),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option("--tag", "-t", help="Tag the image NAME:TAG instead of the spec's (apptainer: the .sif to "
                                         "write; default NAME_TAG.sif next to the spec)."),
    ] = None,
    platform: Annotated[
        Platform | None,
        typer.Option("--platform", help="The image's platform, instead of the spec's \\[image] platform (default: "
                                        "inferred from the targets): linux/arm64 for Grace systems (GH200, GB200, "
                                        "DGX Spark). On another CPU the build runs under qemu-user-static; a "
                                        "kiln-base base is taken for the platform (kiln-base:bookworm-arm64)."),
    ] = None,
    bootstrap: Annotated[
        Bootstrap | None,
        typer.Option("--bootstrap", help="apptainer: where the base comes from: docker (pulled from its registry, "
                                         "the default), docker-daemon, or offline docker-archive, oci-archive, "
                                         "localimage (a file given with --from)."),
    ] = None,
    from_: FromOpt = None,
    builder_from: BuilderFromOpt = None,
    push: Annotated[
        bool, typer.Option("--push", help="Push the image after a successful build (not with apptainer).")
    ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every step.")] = False,
    locked: Annotated[
        bool, typer.Option("--locked", help="Install exactly the spec's kiln.lock (base by digest, hash-checked "
                                            "wheels); fails when the spec changed since `kiln lock`.")
    ] = False,
    cache_to: Annotated[
        str | None,
        typer.Option("--cache-to", help="Export the build cache to this registry reference (HOST:PORT/NAME:TAG), "
                                        "for other machines' --cache-from; docker without buildx pushes the image "
                                        "itself there, with its cache inline.", show_default=False),
    ] = None,
    cache_from: Annotated[
        list[str] | None,
        typer.Option("--cache-from", help="Reuse build steps cached at this registry reference (repeatable).",
                     show_default=False),
    ] = None,
    context: Annotated[
        Path | None,
        typer.Option("--context", help="Render the build context here (default: torchkiln's cache folder)."),
    ] = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
    find_links: FindLinksOpt = None,
    torch_index: TorchIndexOpt = None,
    ca_bundle: Annotated[
        str | None, typer.Option("--ca-bundle", help="PEM CA bundle for TLS-intercepting proxies (a build secret).")
    ] = None,
    network: Annotated[
        str | None, typer.Option("--network", help="'host' to build with host networking.")
    ] = None,
    index_strategy: Annotated[
        str | None, typer.Option("--index-strategy", help="uv index strategy (pip's behaviour: unsafe-best-match).")
    ] = None,
    sources_from_pip: Annotated[
        bool | None, typer.Option("--sources-from-pip",
                                  help="Use this machine's pip configuration as the lowest layer (default: the "
                                       "sources_from_pip setting, `kiln config`; KILN_SOURCES_FROM_PIP=0 turns "
                                       "it off).", show_default=False)
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Write the context and print the build that would run (the engine "
                                             "command, secrets, tags; every field with --json); build nothing.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every line the engine prints.")] = False,
    matrix: MatrixOpt = False,
    builders: Annotated[
        list[str] | None,
        typer.Option("--builders", help="With --matrix: where cells build: 'default' or another docker context, a "
                                        "DOCKER_HOST URL (unix:///…, tcp://…, ssh://…) or a buildx builder name "
                                        "(repeatable, or comma-separated).", show_default=False),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", min=1, help="With --matrix: cells built at once on each builder.")
    ] = 1,
    emulate: Annotated[
        bool, typer.Option("--emulate", help="With --matrix: let builders build other platforms under QEMU "
                                             "(binfmt) instead of refusing cells no builder runs natively.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="With --matrix: rebuild every cell, also those the last run built.")
    ] = False,
    skip_impossible: SkipImpossibleOpt = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help=f"Start build steps expected to run longer than {LONG_STEP_MINUTES} "
                           "minutes (a flash-attn or torch source build) without the warning and question.")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Build the image a spec describes with docker (BuildKit) or podman, and tag it; or, with
    --engine apptainer, build a .sif with `apptainer build` (--fakeroot when not root).

    Package sources come from flags, then KILN_* environment variables, then the spec's \\[sources],
    then the settings file (`kiln config`), then (with --sources-from-pip) pip's configuration; they
    reach the build as secrets only. --base, --engine, --sources-from-pip and --builders default to
    the settings too (flags > KILN_* > the spec > the settings file).

    With --matrix --builders …: every cell of the spec's \\[matrix] on a pool of Docker builders, tagged
    NAME:[TAG-]torchVERSION-VARIANT-pyX.Y[…] (docs/matrix.md); a re-run rebuilds only failed cells.
    """
    runner = make_runner()
    settings = command_settings(spec, base=base, engine=engine_name, sources_from_pip=sources_from_pip,
                                builders=builders or [])
    base, engine_name = settings.base_override, settings.engine
    if matrix and not builders:
        builders = settings.builders or None
    if not matrix:
        for option, value in (("--builders", builders), ("--emulate", emulate or None), ("--force", force or None),
                              ("--skip-impossible", skip_impossible or None), ("--jobs", None if jobs == 1 else jobs)):
            if value is not None:
                raise typer.BadParameter("is for matrix builds: add --matrix", param_hint=option)
    flags = layer_from_flags(
        index_url=index_url,
        extra_index_urls=extra_index_url or (),
        find_links=find_links or (),
        torch_index=torch_index,
        ca_bundle=ca_bundle,
        network=network,
        index_strategy=index_strategy,
        cwd=Path.cwd(),
    )
    engine = get_engine(engine_name, runner)
    sif = engine.info.output == "sif"
    if matrix:
        for option, given in (("--tag", tag), ("--context", context), ("--bootstrap", bootstrap), ("--from", from_),
                              ("--builder-from", builder_from), ("--cache-to", cache_to), ("--locked", locked or None)):
            if given is not None:
                raise typer.BadParameter("cannot be used with --matrix (each cell's tag, context, cache and lock "
                                         "would be its own: docs/matrix.md)", param_hint=option)
        if not engine.info.remote_builders:
            raise InputError(f"matrix builds run on Docker builders; {engine.info.name} is not one.",
                             hint="Use --engine docker (or leave --engine out) with --builders NAME….")
    else:
        for option, chosen in (("--bootstrap", bootstrap), ("--from", from_), ("--builder-from", builder_from)):
            if chosen is not None and not sif:
                raise typer.BadParameter(f"is for apptainer builds; {engine.name} builds FROM the base image "
                                         "(use --base to change it)", param_hint=option)
    # one set of options for a build and for every cell of a matrix (which sets each cell's tag and context)
    options = BuildOptions(
        target=target, base=base, tag=tag, context_dir=context, no_cache=no_cache, push=push,
        cache_from=tuple(cache_from or ()), cache_to=cache_to, locked=locked, from_pip=settings.sources_from_pip,
        flags=flags, user_sources=user_source_layer(settings), platform=platform,
        apptainer=ApptainerOptions(bootstrap or REGISTRY_BOOTSTRAP, from_, builder_from),
    )
    if matrix:
        from torchkiln.cli._build_matrix import build_matrix

        build_matrix(spec, builder_names=builders or [], jobs=jobs, emulate=emulate, force=force,
                     skip_impossible=skip_impossible, dry_run=dry_run, as_json=json,
                     live=live_output() and not json, runner=runner, main_binary=engine.info.binary,
                     has_buildx=engine.info.builder == "buildx", options=options)
        return
    start = time.monotonic()
    invocation = plan_spec(spec, engine, options, runner=runner)
    if not json:
        for w in invocation.warnings:
            err_console.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False, soft_wrap=True)
    if dry_run:
        _dry_run(invocation, json)
        return
    if not yes:
        _warn_long_steps(spec, platform, ask=not json and _interactive())
    if not json:
        err_console.print(
            f"building {escape(str(spec))} ({target}, {invocation.platform}) with "
            f"{escape(engine_label(engine.info.to_dict()))} ({engine.info.builder})",
            highlight=False,
        )
    with StepDisplay(live=live_output() and not json, verbose=verbose) as display:
        summary = execute(invocation, engine, progress=display.event, started=start)
    if json:
        print_json(summary.to_dict())
    else:
        print_summary(summary, spec, tag)


#: a build step expected to run longer than this (on this machine, by the knowledge base's estimates) is
#: announced before the build starts, and asked about on a terminal, unless --yes
LONG_STEP_MINUTES = 10


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def long_steps(plan: BuildPlan, cores: int, mem_gib: float, minutes: float = LONG_STEP_MINUTES) -> list[BuildEstimate]:
    """The compile steps of a plan expected to run longer than ``minutes`` on ``cores`` CPUs and ``mem_gib`` GiB."""
    return [e for e in estimate_builds(plan, load_knowledge(), cores, mem_gib) if e.wall_minutes > minutes]


def _warn_long_steps(spec: Path, platform: str | None, *, ask: bool) -> None:
    """Say (and on a terminal ask) before a build whose compile steps run longer than ~10 minutes."""
    try:
        _s, plan, _d = load_plan(spec, platform=platform)
    except KilnError:  # plan_spec resolved it already; a plan needing an image's facts is not estimated again
        return
    cores, mem_gib = host_resources()
    slow = long_steps(plan, cores, mem_gib)
    if not slow:
        return
    what = "; ".join(f"{e.what} {duration(e.wall_minutes)} ({e.cpu_minutes} CPU-minutes, MAX_JOBS={e.jobs}, "
                     f"peak ~{e.peak_gib} GiB; {e.basis})" for e in slow)
    err_console.print(f"warning: this build compiles for a long time on {cores} cores and {mem_gib:.0f} GiB: {what}. "
                      "A prebuilt wheel (`kiln explain` says why none matched), fewer [gpu] targets or a bigger "
                      "machine shortens it; --yes skips this warning.", highlight=False, markup=False)
    if ask and not typer.confirm("Start the build?", default=True, err=True):
        err_console.print("not started (run it again with --yes to start without asking)", highlight=False)
        raise typer.Exit(code=int(ExitCode.INTERRUPTED))  # the user stopped it, as with Ctrl-C


def _dry_run(inv: BuildInvocation, as_json: bool) -> None:
    """Write the context (so it can be read or built by hand) and print the invocation; build nothing.
    For another platform than this machine's, the context's uv of that CPU is fetched first."""
    inv.write_context(make_runner())
    if as_json:
        print_json(inv.to_dict())
        return
    done = "written after a successful build" if inv.output_file is not None else "tagged after a successful build"
    prefix = " ".join(f"{k}={v}" for k, v in inv.command.env.items())
    where = f"cd {shlex.quote(str(inv.command.cwd))} && " if inv.command.cwd is not None else ""
    console.print(f"context: {inv.context}", highlight=False)
    console.print(f"image:   {inv.image} ({done})", highlight=False)
    console.print(f"platform: {inv.platform} (base {inv.base_image})", highlight=False)
    console.print(f"command: {where}{prefix + ' ' if prefix else ''}{shlex.join(inv.command.argv)}",
                  highlight=False, soft_wrap=True)
    if inv.secrets:
        console.print("secrets: " + ", ".join(f"{k}={v}" for k, v in sorted(inv.secrets.items())) +
                      " (written for the build only)", highlight=False)
