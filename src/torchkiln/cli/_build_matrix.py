"""`kiln build --matrix --builders …`: the CLI half of ``torchkiln.building.matrix``: it names the
builders, shows each cell's progress and prints the summary; planning, scheduling and building are
``plan_matrix`` and ``run_matrix``, and a failure is a ``BuildError`` raised to the CLI's boundary."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from torchkiln.building.invocation import BuildOptions
from torchkiln.building.matrix import (
    CellRun,
    ReadyBuilder,
    builders_from,
    matrix_failure,
    plan_matrix,
    run_matrix,
)
from torchkiln.cli._common import console, err_console, print_json, state
from torchkiln.cli._matrix import refuse_impossible
from torchkiln.load import load_matrix
from torchkiln.redact import redact
from torchkiln.runner import Runner

_STYLE = {"queued": "dim", "building": "cyan", "built": "green", "skipped": "green", "failed": "bold red"}


class MatrixDisplay:
    """One line per cell: live on a terminal, one line per start and finish otherwise."""

    def __init__(self, runs: Sequence[CellRun], *, live: bool, quiet: bool) -> None:
        self.runs = runs
        self.quiet = quiet
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.live: Live | None = (Live(self, console=err_console, transient=True, refresh_per_second=4)
                                  if live and not quiet else None)

    def __rich__(self) -> Table:
        t = Table(box=None, pad_edge=False, title=f"matrix build, {time.monotonic() - self.started:.0f} s",
                  title_justify="left")
        for col in ("cell", "builder", "status", "time", "image / step"):
            t.add_column(col, overflow="ellipsis", no_wrap=True)
        now = time.monotonic()
        for r in self.runs:
            secs = r.seconds if r.status in ("built", "failed") else (now - r.started if r.started else 0.0)
            what = r.step if r.status == "building" and r.step else r.planned.rc.image
            t.add_row(str(r.index), r.builder, Text(r.status, style=_STYLE[r.status]),
                      f"{secs:.0f}s" if secs else "", Text(what))
        return t

    def __enter__(self) -> MatrixDisplay:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def notify(self, run: CellRun) -> None:
        if self.live is not None or self.quiet:
            return
        with self.lock:
            rc = run.planned.rc
            if run.status == "building":
                err_console.print(f"cell {rc.cell.index} ({escape(rc.cell.label)}) → {escape(run.builder)}: "
                                  f"building {escape(rc.image)}", highlight=False)
            else:
                err_console.print(f"cell {rc.cell.index} on {escape(run.builder)}: "
                                  f"[{_STYLE[run.status]}]{run.status}[/] in {run.seconds:.1f} s"
                                  + (f" ({escape(redact(run.error.message))})" if run.error else ""),
                                  highlight=False)


def build_matrix(
    spec: Path, *, builder_names: Sequence[str], options: BuildOptions, jobs: int, emulate: bool, force: bool,
    skip_impossible: bool, dry_run: bool, as_json: bool, live: bool, runner: Runner, main_binary: str,
    has_buildx: bool,
) -> None:
    """Name the builders, have ``building.matrix`` plan and run the cells, show progress and the summary."""
    start = time.monotonic()
    spec_obj, all_cells, _spec_dir = load_matrix(spec)
    cells = refuse_impossible(all_cells, skip_impossible, building=True)
    skipped_impossible = [c for c in all_cells if not c.ok]
    builders = builders_from(builder_names, runner, main_binary, has_buildx)
    mp = plan_matrix(spec, spec_obj.image.name, cells, builders, options, emulate=emulate, force=force, runner=runner)
    runs, ready = mp.runs, mp.builders
    if dry_run:
        _dry_run(runs, ready, as_json)
        return
    if not as_json:
        todo_n = sum(1 for r in runs if r.status == "queued")
        err_console.print(f"building {todo_n} of {len(runs)} cells of {escape(str(spec))} on "
                          f"{', '.join(escape(b.name) for b in ready)}"
                          + (f" ({len(runs) - todo_n} already built: skipped)" if todo_n < len(runs) else ""),
                          highlight=False)
    with MatrixDisplay(runs, live=live, quiet=as_json) as display:
        manifests = run_matrix(mp, jobs=jobs, push=options.push, runner=runner, notify=display.notify)
    wall = time.monotonic() - start
    if as_json:
        print_json(_summary_json(spec, runs, ready, manifests, wall, skipped_impossible))
    else:
        _print_summary(runs, ready, manifests, wall, skipped_impossible)
    error = matrix_failure(mp, manifests)
    if error is not None:
        # with --json, stdout holds the summary (every error in it): the boundary writes the message to stderr only
        error.in_json_output = as_json
        raise error


def _print_summary(runs: Sequence[CellRun], ready: Sequence[ReadyBuilder], manifests: Sequence[Any], wall: float,
                   impossible: Sequence[Any]) -> None:
    t = Table(title=f"matrix: {len(runs)} cells on {len(ready)} builders in {wall:.1f} s", title_justify="left")
    for col in ("cell", "values", "image", "builder", "result", "time", "cache"):
        t.add_column(col, overflow="fold")
    for r in runs:
        s = r.summary
        cache = f"{s.cache_hits} reused, {s.cache_misses} rebuilt" if s else ""
        result = r.status + (" + pushed" if s is not None and s.pushed else "")
        t.add_row(str(r.index), Text(r.planned.rc.cell.label), Text(r.planned.rc.image), r.builder,
                  Text(result, style=_STYLE[r.status]), f"{r.seconds:.1f}s" if r.seconds else "", cache)
    for c in impossible:
        t.add_row(str(c.cell.index), Text(c.cell.label), Text("impossible: " + c.error.message, style="yellow"),
                  "", Text("left out", style="yellow"), "", "")
    console.print(t)
    for b in ready:
        mine = [r for r in runs if r.builder == b.name and r.status in ("built", "failed")]
        console.print(f"  {escape(b.name)}: {len(mine)} cells built, {sum(r.seconds for r in mine):.1f} s busy",
                      highlight=False)
    for m in manifests:
        console.print(f"  manifest {escape(m.ref)}: {m.status}" + (f" ({escape(m.reason)})" if m.reason else ""),
                      highlight=False)


def _summary_json(spec: Path, runs: Sequence[CellRun], ready: Sequence[ReadyBuilder], manifests: Sequence[Any],
                  wall: float, impossible: Sequence[Any]) -> dict[str, Any]:
    built = [r for r in runs if r.status in ("built", "failed")]
    return {
        "spec": str(spec),
        "cells": [r.to_dict() for r in runs],
        "impossible": [c.to_dict() for c in impossible],
        "failed": [r.index for r in runs if r.status == "failed"],
        "builders": [{**b.to_dict(), "cells": [r.index for r in runs if r.builder == b.name],
                      "busy_seconds": round(sum(r.seconds for r in built if r.builder == b.name), 2)}
                     for b in ready],
        "manifests": [m.to_dict() for m in manifests],
        "wall_seconds": round(wall, 2),
        "cell_seconds": round(sum(r.seconds for r in built), 2),
    }


def _dry_run(runs: Sequence[CellRun], ready: Sequence[ReadyBuilder], as_json: bool) -> None:
    if as_json:
        print_json({"builders": [b.to_dict() for b in ready],
                    "cells": [{**r.to_dict(), "invocation": r.planned.invocation.to_dict()} for r in runs]})
        return
    for r in runs:
        inv = r.planned.invocation
        state_note = " (already built: skipped)" if r.status == "skipped" else ""
        console.print(f"cell {r.index} ({escape(r.planned.rc.cell.label)}) on {escape(r.builder)}{state_note}",
                      highlight=False)
        console.print(f"  image:   {inv.image}" + (" (pushed)" if inv.push else ""), highlight=False)
        console.print(f"  command: {' '.join(inv.command.argv)}", highlight=False, soft_wrap=True)
    if state.debug:
        console.print(f"builders: {', '.join(b.name + '=' + '/'.join(b.platforms) for b in ready)}")
