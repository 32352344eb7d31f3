"""`kiln explain`: what was chosen for a spec and why, with sources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json
from torchkiln.cli._load import load_plan
from torchkiln.knowledge import load_knowledge


def _gpu_table() -> Table:
    kb = load_knowledge()
    t = Table(title="GPUs torchkiln knows")
    for c in ("capability", "family", "names", "note"):
        t.add_column(c)
    rows: dict[str, list[str]] = {}
    info: dict[str, tuple[str, str]] = {}
    for g in kb.gpus:
        key = str(g.capability)
        rows.setdefault(key, []).append(g.name)
        info[key] = (g.family, "ARM only" if g.platform == "aarch64" else "")
    for cap in sorted(rows, key=lambda s: tuple(int(x) for x in s.split("."))):
        t.add_row(cap, info[cap][0], ", ".join(rows[cap]), info[cap][1])
    return t


@app.command("explain")
def explain_cmd(
    spec: Annotated[
        Path | None, typer.Argument(help="A kiln.toml (or a folder holding one).", show_default=False)
    ] = None,
    gpus: Annotated[bool, typer.Option("--gpus", help="List the GPU names and capabilities torchkiln knows.")] = False,
    json: JsonOpt = False,
) -> None:
    """Explain the decisions behind a spec's plan: what was chosen, why, and the source of each fact."""
    if gpus:
        if json:
            kb = load_knowledge()
            print_json([{"name": g.name, "capability": str(g.capability), "family": g.family,
                         "platform": g.platform} for g in kb.gpus])
        else:
            console.print(_gpu_table())
        return
    if spec is None:
        raise typer.BadParameter("give a spec, or --gpus")
    _s, plan, _ = load_plan(spec)
    if json:
        print_json({"image": plan.image_ref, "decisions": [d.__dict__ for d in plan.decisions],
                    "warnings": list(plan.warnings)})
        return
    kb = load_knowledge()
    t = Table(title=f"Why {plan.image_ref} is built this way", title_justify="left")
    t.add_column("decision", style="bold")
    t.add_column("choice")
    t.add_column("why")
    t.add_column("source", style="dim")
    for d in plan.decisions:
        src = ", ".join(
            f"{k}: {kb.sources[k]['title']}" if k in kb.sources else k
            for k in (s.strip() for s in d.source.split(",")) if k
        ) if d.source and d.source in kb.sources else d.source
        t.add_row(d.topic, d.choice, d.why, src)
    for tg in plan.targets:
        t.add_row(f"target {tg.name}", f"{tg.capability}", tg.how, "GPUS")
    console.print(t)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
