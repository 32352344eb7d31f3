"""`kiln explain`: what was chosen for a spec and why, with sources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, duration, host_resources, print_json
from torchkiln.cli._matrix import MatrixOpt, SkipImpossibleOpt, cells_table, refuse_impossible
from torchkiln.cli.config import with_base_setting
from torchkiln.estimate import BuildEstimate, estimate_builds
from torchkiln.knowledge import load_knowledge
from torchkiln.load import load_matrix, load_plan
from torchkiln.plan import BuildPlan


def _estimate_table(estimates: tuple[BuildEstimate, ...], cores: int, mem_gib: float) -> Table:
    t = Table(title=f"Compile time and memory on {cores} cores and {mem_gib:.0f} GiB (rough estimates)",
              title_justify="left")
    for c in ("build", "archs", "MAX_JOBS", "peak memory", "CPU time", "wall time", "basis"):
        t.add_column(c, overflow="fold")
    for e in estimates:
        t.add_row(*(Text(x) for x in (e.what, str(e.archs), f"{e.jobs} ({e.per_job_gib} GiB each)",
                                      f"~{e.peak_gib} GiB", duration(e.cpu_minutes), duration(e.wall_minutes),
                                      e.basis)))
    return t


def _gpu_table() -> Table:
    kb = load_knowledge()
    t = Table(title="GPUs torchkiln knows")
    for c in ("capability", "family", "names", "hosts"):
        t.add_column(c)
    rows: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    family: dict[tuple[str, tuple[str, ...]], str] = {}
    for g in kb.gpus:
        key = (str(g.capability), g.hosts)
        rows.setdefault(key, []).append(g.name)
        family[key] = g.family
    for key in sorted(rows, key=lambda k: (tuple(int(x) for x in k[0].split(".")), k[1] != ("x86_64", "aarch64"))):
        hosts = key[1]
        note = ("Jetson: refused (L4T/JetPack images)" if "tegra" in hosts
                else "x86_64 or aarch64" if hosts == ("x86_64", "aarch64") else f"{'/'.join(hosts)} only (linux/arm64)")
        t.add_row(key[0], family[key], ", ".join(rows[key]), note)
    return t


@app.command("explain")
def explain_cmd(
    spec: Annotated[
        Path | None,
        typer.Argument(help="A kiln.toml, a pyproject.toml with \\[tool.kiln], or a project folder.",
                       show_default=False)
    ] = None,
    gpus: Annotated[bool, typer.Option("--gpus", help="List the GPU names and capabilities torchkiln knows.")] = False,
    cores: Annotated[
        int | None, typer.Option("--cores", min=1, help="CPU cores of the build machine (default: this one's).")
    ] = None,
    memory: Annotated[
        float | None,
        typer.Option("--memory", min=1, help="Memory of the build machine in GiB (default: this one's available)."),
    ] = None,
    matrix: MatrixOpt = False,
    skip_impossible: SkipImpossibleOpt = False,
    json: JsonOpt = False,
) -> None:
    """Explain the decisions behind a spec's plan: what was chosen, why, and the source of each fact.

    With --matrix: the decisions of every cell of the spec's \\[matrix], and for each impossible cell
    its reason and fix (exit 4, or 0 with --skip-impossible)."""
    if gpus:
        if json:
            kb = load_knowledge()
            print_json([{"name": g.name, "capability": str(g.capability), "family": g.family,
                         "hosts": list(g.hosts)} for g in kb.gpus])
        else:
            console.print(_gpu_table())
        return
    if spec is None:
        raise typer.BadParameter("give a spec, or --gpus")
    host_cores, host_mem = host_resources()
    n_cores, mem_gib = cores or host_cores, memory or host_mem
    if matrix:
        _explain_matrix(spec, n_cores, mem_gib, skip_impossible, json)
        return
    _s, plan, _ = load_plan(spec)
    plan = with_base_setting(plan, spec)
    if json:
        print_json(_explain_json(plan, n_cores, mem_gib))
        return
    _explain(plan, n_cores, mem_gib)


def _explain_json(plan: BuildPlan, n_cores: int, mem_gib: float) -> dict[str, object]:
    estimates = estimate_builds(plan, load_knowledge(), n_cores, mem_gib)
    return {"image": plan.image_ref, "decisions": [d.__dict__ for d in plan.decisions],
            "warnings": list(plan.warnings),
            "builds": {"cores": n_cores, "memory_gib": round(mem_gib, 1),
                       "estimates": [e.to_dict() for e in estimates]}}


def _explain_matrix(spec: Path, n_cores: int, mem_gib: float, skip: bool, as_json: bool) -> None:
    _s, cells, _ = load_matrix(spec)
    if as_json:
        print_json({"spec": str(spec), "cells": [
            {"cell": c.cell.index, "label": c.cell.label, "values": c.cell.to_dict(), "ok": c.ok,
             **({"explain": {**_explain_json(c.plan, n_cores, mem_gib), "image": c.image}} if c.plan is not None
                else {"error": c.error.to_dict() if c.error else None})}
            for c in cells]})
    else:
        console.print(cells_table(spec, cells))
        for c in cells:
            console.print(Text(f"\ncell {c.cell.index}: {c.cell.label}", style="bold"))
            if c.plan is not None:
                _explain(c.plan, n_cores, mem_gib, image=c.image)
            elif c.error is not None:
                console.print(Text.assemble(("impossible: ", "red"), c.error.message, ("\n  fix: ", "bold"),
                                            c.error.hint or ""))
    refuse_impossible(cells, skip)


def _explain(plan: BuildPlan, n_cores: int, mem_gib: float, image: str | None = None) -> None:
    kb = load_knowledge()
    estimates = estimate_builds(plan, kb, n_cores, mem_gib)
    t = Table(title=f"Why {escape(image or plan.image_ref)} is built this way", title_justify="left")
    t.add_column("decision", style="bold", overflow="fold")
    t.add_column("choice", overflow="fold")
    t.add_column("why", overflow="fold")
    t.add_column("source", style="dim", overflow="fold")
    for d in plan.decisions:
        src = ", ".join(
            f"{k}: {kb.sources[k]['title']}" if k in kb.sources else k
            for k in (s.strip() for s in d.source.split(",")) if k
        ) if d.source and d.source in kb.sources else d.source
        # the texts name spec tables such as [base]: plain text, never rich markup
        t.add_row(*(Text(x) for x in (d.topic, d.choice, d.why, src)))
    for tg in plan.targets:
        t.add_row(*(Text(x) for x in (f"target {tg.name}", f"{tg.capability}", tg.how, "GPUS")))
    console.print(t)
    if estimates:
        console.print(_estimate_table(estimates, n_cores, mem_gib))
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
