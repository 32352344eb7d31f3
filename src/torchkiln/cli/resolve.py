"""`kiln resolve`: check specs against the knowledge base and print the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, duration, host_resources, print_json
from torchkiln.cli._matrix import MatrixOpt, SkipImpossibleOpt, cells_table, matrix_json, refuse_impossible
from torchkiln.cli.config import with_base_setting
from torchkiln.estimate import estimate_builds
from torchkiln.knowledge import load_knowledge
from torchkiln.load import load_matrix, load_plan
from torchkiln.plan import BuildPlan


def _builds(plan: BuildPlan) -> dict[str, str]:
    """What is compiled during the build, with the wall-time estimate on this machine."""
    cores, mem_gib = host_resources()
    return {e.what: f"built from source, {duration(e.wall_minutes)} on {cores} cores (rough estimate; "
                    "`kiln explain` has the details)"
            for e in estimate_builds(plan, load_knowledge(), cores, mem_gib)}


def _summary(path: Path, plan: BuildPlan) -> Table:
    t = Table(title=f"{path} → {plan.image_ref}", show_header=False, title_justify="left")
    t.add_column(style="bold", overflow="fold")
    t.add_column(overflow="fold")
    builds = _builds(plan) if plan.extensions or plan.torch.build else {}

    def row(key: str, value: str) -> None:  # values are plain text: they may name tables such as [base]
        t.add_row(key, Text(value))

    torch = f"{plan.torch.requirement}  {' '.join(plan.torch.companions)}".strip()
    series = next((d.why.split(":")[0] for d in plan.decisions if d.topic == "torch" and "series:" in d.why), "")
    row("torch", torch + (f"  — {builds[b]}" if (b := f"torch {plan.torch.version} from source") in builds else "")
        + (f"  ({series}: its newest patch that passes every check)" if series else ""))
    row("CUDA", f"{plan.torch.cuda} ({plan.torch.variant})" if plan.torch.cuda else "none (CPU)")
    row("Python", plan.python + (" (free-threaded, installed by uv in the base stage)" if plan.python_install
                                 else " (free-threaded)" if plan.python.endswith("t") else ""))
    row("base image", plan.base_image)
    if plan.torch.cuda:
        row("arch list", plan.arch_list)
        row("min driver", f"{plan.min_driver}  (NVIDIA_REQUIRE_CUDA {plan.nvidia_require_cuda})")
        if plan.cuda_compat:
            row("forward compat", f"cuda-compat from {plan.cuda_compat}, used at start only on an older host driver")
    for tg in plan.targets:
        t.add_row(f"target {tg.name}", Text.assemble(("✓", "green") if tg.covered else ("✗", "red"),
                                                     f" {tg.capability} — {tg.how}"))
    if plan.pip_packages:
        row("pip packages", " ".join(plan.pip_packages))
    if plan.apt_packages:
        row("apt packages", " ".join(plan.apt_packages))
    if plan.project is not None:
        p = plan.project
        what = f"{len(p.requirements)} dependencies from {p.source}" + (" (hashed)" if p.hashed else "")
        if p.torch_from:
            what += f"; torch from {p.torch_from.split(':', 1)[0]}"
        if p.package:
            what += f"; {p.name or p.root} as a wheel" + (" (compiled)" if p.compiled else "")
        if p.locals:
            what += f"; local packages {', '.join(path for path, _ in p.locals)}"
        row(f"project {p.root}", what)
    for ext in plan.extensions:
        if ext.build == "prebuilt":
            how = f"prebuilt wheel {ext.prebuilt}" if ext.prebuilt else "prebuilt wheel"
        else:
            how = builds.get(ext.name, "built from source")
        row(f"extension {ext.name}", f"{ext.spec}  — {how}")
    for w in plan.warnings:
        t.add_row(Text("warning", style="yellow"), Text(w))
    return t


@app.command("resolve")
def resolve_cmd(
    specs: Annotated[list[Path], typer.Argument(help="kiln.toml files (or folders holding one).", show_default=False)],
    matrix: MatrixOpt = False,
    skip_impossible: SkipImpossibleOpt = False,
    json: JsonOpt = False,
) -> None:
    """Check spec(s) against the knowledge base and print the pinned plan.

    Exits 0 when every spec resolves; 3 for an invalid spec, 4 for an impossible combination
    (the message says what would work instead). With --matrix: every cell of each spec's \\[matrix],
    resolved before anything is built; exit 4 lists each impossible cell with its reason and fix
    (0 with --skip-impossible).
    """
    if matrix:
        _resolve_matrix(specs, skip_impossible, json)
        return
    results = []
    for path in specs:
        _spec, plan, _ = load_plan(path)
        plan = with_base_setting(plan, path)
        results.append((path, plan))
    if json:
        data = [dict(spec=str(p), **plan.to_dict()) for p, plan in results]
        print_json(data[0] if len(data) == 1 else data)
        return
    for path, plan in results:
        console.print(_summary(path, plan))


def _resolve_matrix(specs: list[Path], skip: bool, as_json: bool) -> None:
    loaded = [(path, load_matrix(path)[1]) for path in specs]
    if as_json:
        data = [matrix_json(path, cells) for path, cells in loaded]
        print_json(data[0] if len(data) == 1 else data)
    else:
        for path, cells in loaded:
            console.print(cells_table(path, cells))
    for _path, cells in loaded:
        refuse_impossible(cells, skip)
