"""`kiln prune`: cut the CUDA fat binaries of shared objects down to the target GPUs, in place.

Thin: resolves the targets (GPU names or capabilities, like ``kiln inspect``), runs
:mod:`torchkiln.inspect.prune` over a shared object, a folder or a wheel, and prints a table or JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json
from torchkiln.cli._common import human_size as human
from torchkiln.cli.inspect import _targets
from torchkiln.errors import InputError
from torchkiln.inspect import fatbin
from torchkiln.inspect import prune as pruner


@app.command("prune")
def prune_cmd(
    path: Annotated[
        Path,
        typer.Argument(help="A shared object (.so), a folder (every ELF file under it) or a wheel (.whl; its "
                       "RECORD is rewritten).", show_default=False, metavar="PATH"),
    ],
    targets: Annotated[
        list[str] | None,
        typer.Option("--targets", "-t", help="Target GPUs, names or compute capabilities (H100, 8.6, sm_120); "
                     "repeat or separate with commas. Default: the \\[gpu] targets of --spec or ./kiln.toml."),
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Take the targets from this kiln.toml (default: ./kiln.toml).")
    ] = None,
    ptx: Annotated[
        bool, typer.Option("--ptx", help="Also keep the newest PTX that can run on a target (forward "
                           "compatibility with newer GPUs, through the driver's JIT).")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would be removed; change nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Keep only the device code the target GPUs run, and make the files smaller.

    Each `.nv_fatbin` keeps, per target, its SASS (with the a/f variants), else the newest SASS of
    the same major, and PTX where no SASS runs there (or with --ptx); the sections after it move
    down so the file shrinks (virtual addresses unchanged). NVIDIA's libraries (cuBLAS, cuDNN,
    NCCL...) are never modified: their bytes for other GPUs are reported instead.
    """
    if not targets and spec is None and not Path("kiln.toml").is_file():
        # a standard list would prune almost nothing and say little: the user must name the GPUs
        raise typer.BadParameter("give the GPUs to keep (e.g. --targets H100), or a spec with [gpu] targets",
                                 param_hint="--targets")
    caps = [(t.capability.major, t.capability.minor) for t in _targets(targets, spec)]
    if not path.exists():
        raise InputError(f"{path}: no such file or folder.", hint="Give a .so file, a folder or a .whl.")
    try:
        results = pruner.prune_tree(str(path), caps, ptx=ptx, dry_run=dry_run)
    except (pruner.PruneError, fatbin.FatbinError) as e:
        raise InputError(f"{e}.", hint="Give an ELF shared object, a folder or a wheel; a corrupt file is "
                         "left as it was.") from None
    summary = pruner.summary(results)
    if json_out:
        print_json({"targets": [f"{a}.{b}" for a, b in caps], "ptx": ptx, "dry_run": dry_run, "summary": summary,
                    "files": [r.to_dict() for r in results]})
        return
    table = Table(title=f"kiln prune {escape(str(path))} → {', '.join(f'{a}.{b}' for a, b in caps)}"
                  + (" (dry run)" if dry_run else ""))
    for col in ("file", "status", "size", "device code", "entries", "kept"):
        table.add_column(col)
    for r in results:
        size = f"{human(r.size_before)} → {human(r.size_after)}"
        code = f"{human(r.fatbin_before)} → {human(r.fatbin_after)}"
        if r.status == "nvidia":
            size, code = human(r.size_before), f"{human(r.foreign_bytes)} for other GPUs"
        table.add_row(escape(r.path), r.status + (f" ({escape(r.note)})" if r.status in ("zeroed", "skipped") else ""),
                      size, code, f"{r.entries_before} → {r.entries_after}", " ".join(r.kept))
    console.print(table)
    saved = summary["bytes_before"] - summary["bytes_after"]
    console.print(f"{'would save' if dry_run else 'saved'} {human(saved)} in {summary['files']} file(s); "
                  f"NVIDIA's {summary['nvidia_files']} librar(ies) carry {human(summary['nvidia_foreign_bytes'])} "
                  "for other GPUs (not modified).")
