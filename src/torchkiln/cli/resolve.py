"""`kiln resolve`: check specs against the knowledge base and print the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json
from torchkiln.cli._load import load_plan
from torchkiln.plan import BuildPlan


def _summary(path: Path, plan: BuildPlan) -> Table:
    t = Table(title=f"{path} → {plan.image_ref}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("torch", f"{plan.torch.requirement}  {' '.join(plan.torch.companions)}".strip())
    t.add_row("CUDA", f"{plan.torch.cuda} ({plan.torch.variant})" if plan.torch.cuda else "none (CPU)")
    t.add_row("Python", plan.python)
    t.add_row("base image", plan.base_image)
    if plan.torch.cuda:
        t.add_row("arch list", plan.arch_list)
        t.add_row("min driver", f"{plan.min_driver}  (NVIDIA_REQUIRE_CUDA {plan.nvidia_require_cuda})")
    for tg in plan.targets:
        mark = "[green]✓[/green]" if tg.covered else "[red]✗[/red]"
        t.add_row(f"target {tg.name}", f"{mark} {tg.capability} — {tg.how}")
    for w in plan.warnings:
        t.add_row("[yellow]warning[/yellow]", w)
    return t


@app.command("resolve")
def resolve_cmd(
    specs: Annotated[list[Path], typer.Argument(help="kiln.toml files (or folders holding one).", show_default=False)],
    json: JsonOpt = False,
) -> None:
    """Check spec(s) against the knowledge base and print the pinned plan.

    Exits 0 when every spec resolves; 3 for an invalid spec, 4 for an impossible combination
    (the message says what would work instead).
    """
    results = []
    for path in specs:
        _spec, plan, _ = load_plan(path)
        results.append((path, plan))
    if json:
        data = [dict(spec=str(p), **plan.to_dict()) for p, plan in results]
        print_json(data[0] if len(data) == 1 else data)
        return
    for path, plan in results:
        console.print(_summary(path, plan))
