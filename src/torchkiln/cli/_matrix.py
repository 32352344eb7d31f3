"""What `kiln resolve --matrix`, `kiln explain --matrix` and `kiln build --matrix` print about cells."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from torchkiln.errors import ResolveError
from torchkiln.matrix import ResolvedCell, impossible_summary, manifest_groups

MatrixOpt = Annotated[bool, typer.Option("--matrix", help="Every cell of the spec's \\[matrix] (docs/matrix.md).")]
SkipImpossibleOpt = Annotated[
    bool,
    typer.Option("--skip-impossible", help="With --matrix: leave out the cells that cannot be resolved (listed with "
                                          "their reason and fix) instead of refusing the whole matrix."),
]


def cells_table(path: Path, cells: Sequence[ResolvedCell]) -> Table:
    n_bad = sum(1 for c in cells if not c.ok)
    title = f"{path}: {len(cells)} cells" + (f", {n_bad} impossible" if n_bad else "")
    t = Table(title=title, title_justify="left")
    for col in ("cell", "values", "image", "torch", "CUDA", "Python", "platform"):
        t.add_column(col, overflow="fold")
    for rc in cells:
        values = Text(rc.cell.label)
        if rc.plan is None:
            assert rc.error is not None
            t.add_row(str(rc.cell.index), values, Text("✗ " + rc.error.message, style="red"), "", "", "", "")
            continue
        p = rc.plan
        t.add_row(str(rc.cell.index), values, Text(rc.image), p.torch.requirement, p.torch.cuda or "CPU",
                  p.python, p.platform)
    return t


def matrix_json(path: Path, cells: Sequence[ResolvedCell]) -> dict[str, Any]:
    groups = manifest_groups(cells)
    return {
        "spec": str(path),
        "cells": [c.to_dict() for c in cells],
        "impossible": [c.cell.index for c in cells if not c.ok],
        "manifests": {ref: [c.image for c in group] for ref, group in groups.items()},
    }


def refuse_impossible(cells: Sequence[ResolvedCell], skip: bool, *, building: bool = False) -> tuple[ResolvedCell, ...]:
    """The cells to go on with: all of them, or (``skip``) the resolved ones; else a ResolveError (exit 4)."""
    bad = [c for c in cells if not c.ok]
    if not bad:
        return tuple(cells)
    if skip:
        return tuple(c for c in cells if c.ok)
    raise ResolveError(
        f"{len(bad)} of {len(cells)} matrix cells cannot be built" + (" (nothing was built)." if building else "."),
        hint="Fix or exclude those cells ([matrix] exclude), or pass --skip-impossible to go on with the "
             f"{len(cells) - len(bad)} others.",
        details=impossible_summary(bad),
    )
