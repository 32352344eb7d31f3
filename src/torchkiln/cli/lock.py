"""`kiln lock SPEC`: write ``kiln.lock`` beside the spec (see ``torchkiln.building.locking``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from torchkiln.building.locking import lock_spec
from torchkiln.building.sources import layer_from_flags, resolve_sources
from torchkiln.cli import app
from torchkiln.cli._common import (
    ExtraIndexUrlOpt,
    FindLinksOpt,
    IndexUrlOpt,
    JsonOpt,
    TorchIndexOpt,
    console,
    err_console,
    print_json,
)
from torchkiln.cli.build import EngineOpt, make_runner
from torchkiln.cli.config import command_settings
from torchkiln.engines import get_engine
from torchkiln.load import load_plan
from torchkiln.settings import user_source_layer


@app.command("lock")
def lock_cmd(
    spec: Annotated[Path, typer.Argument(help="A kiln.toml (or a folder holding one).", show_default=False)],
    upgrade: Annotated[
        bool, typer.Option("--upgrade", help="Take the newest versions the spec allows (and the base's current "
                                             "digest); without it the lock's versions are kept where still allowed.")
    ] = False,
    base: Annotated[
        str | None, typer.Option("--base", help="Lock this base image instead of the plan's (as kiln build --base; "
                                    "default: the base setting, `kiln config`).")
    ] = None,
    engine_name: EngineOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexUrlOpt = None,
    find_links: FindLinksOpt = None,
    torch_index: TorchIndexOpt = None,
    ca_bundle: Annotated[str | None, typer.Option("--ca-bundle", help="PEM CA bundle for the indexes.")] = None,
    index_strategy: Annotated[str | None, typer.Option("--index-strategy", help="uv index strategy.")] = None,
    no_knowledge_update: Annotated[
        bool, typer.Option("--no-knowledge-update", help="Skip the `kiln knowledge update` step (learning torch "
                                                        "releases the built-in rows lack from the indexes).")
    ] = False,
    sources_from_pip: Annotated[
        bool | None, typer.Option("--sources-from-pip",
                                  help="Use this machine's pip configuration as the lowest layer (default: the "
                                       "sources_from_pip setting, `kiln config`; KILN_SOURCES_FROM_PIP=0 turns "
                                       "it off).", show_default=False)
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Pin every input of the spec's build in kiln.lock beside it: the base image's digest and every
    wheel (name, version, URL, sha256) of torch, its companions, the packages and the extension build
    inputs, for the spec's platform, resolved by uv. `kiln build --locked` then installs exactly that.

    First it runs `kiln knowledge update` for the spec's indexes and platform (--no-knowledge-update skips it).
    """
    runner = make_runner()
    settings = command_settings(spec, base=base, engine=engine_name, sources_from_pip=sources_from_pip)
    base, engine_name = settings.base_override, settings.engine
    flags = layer_from_flags(index_url=index_url, extra_index_urls=extra_index_url or (), find_links=find_links or (),
                             torch_index=torch_index, ca_bundle=ca_bundle, network=None,
                             index_strategy=index_strategy, cwd=Path.cwd())
    engine = get_engine(engine_name, runner)
    if not no_knowledge_update:  # lock is online anyway: a torch release newer than the rows resolves then
        from torchkiln.cli.knowledge import learn_before_lock

        learn_before_lock(spec, flags, settings.sources_from_pip, runner, json, user=user_source_layer(settings))
    _s, plan, spec_dir = load_plan(spec)
    sources = resolve_sources(flags=flags, plan_sources=plan.sources, spec_dir=spec_dir.resolve(),
                              from_pip=settings.sources_from_pip, runner=runner, user=user_source_layer(settings))
    if not json:
        err_console.print(f"locking {escape(str(spec))} for {plan.platform} (uv pip compile)", highlight=False)
    result = lock_spec(spec, engine, base=base, sources=sources, runner=runner, upgrade=upgrade)
    if json:
        print_json(result.to_dict())
        return
    d = result.to_dict()
    b = result.lock.base
    pinned = b.pinned_ref or f"{b.image} (local only: image id {b.id[:19]})"
    console.print(f"[bold green]{'wrote' if result.changed else 'unchanged'}[/bold green] {escape(str(result.path))} "
                  f"in {result.seconds:.1f} s", highlight=False)
    console.print(f"  base {escape(pinned)}", highlight=False)
    console.print("  " + " · ".join(f"{g}: {n} pinned" for g, n in d["packages"].items() if n), highlight=False)
    console.print(f"build it: kiln build {spec} --locked", highlight=False)
