"""`kiln inspect`: layers, wasted bytes and the GPU architectures of every CUDA binary of an image.

Thin: picks the reader for the argument (archive, layout, wheel, ELF file or image name), resolves
the targets, and formats the :class:`~torchkiln.inspect.report.InspectReport` as tables or JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, human_size, print_json, state
from torchkiln.cli.config import engine_setting
from torchkiln.errors import ExitCode, InputError
from torchkiln.inspect.analyze import inspect_image_name, inspect_path, looks_like_path
from torchkiln.inspect.coverage import Target, arch_sort_key, default_targets, parse_targets
from torchkiln.inspect.report import BinaryReport, InspectReport
from torchkiln.knowledge import load_knowledge

EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="docker or podman, for an image name (default: "
        "KILN_ENGINE or the kiln config engine, else the first usable)."),
]


def _targets(texts: list[str] | None, spec: Path | None) -> tuple[Target, ...]:
    knowledge = load_knowledge()
    if texts:
        return parse_targets(texts, knowledge)
    spec_file = spec if spec is not None else (Path("kiln.toml") if Path("kiln.toml").is_file() else None)
    spec_targets: list[str] | None = None
    if spec_file is not None:
        from torchkiln.spec import load_spec

        spec_targets = load_spec(spec_file).gpu.targets
    return default_targets(knowledge, spec_targets)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None] | None]:
    if not enabled or not err_console.is_terminal:
        yield None
        return
    with err_console.status("reading…") as status:
        yield lambda msg: status.update(escape(msg))


def _mark(ok: bool) -> str:
    return "[green]✓[/green]" if ok else "[red]✗[/red]"


def _archs(archs: tuple[str, ...] | list[str], limit: int = 12) -> str:
    items = sorted(set(archs), key=arch_sort_key)
    text = " ".join(items[:limit])
    return text + (f" (+{len(items) - limit})" if len(items) > limit else "")


def _print_image(report: InspectReport, top: int) -> None:
    img = report.image
    assert img is not None
    tags = ", ".join(img.tags) or "untagged"
    plat = "/".join(x for x in (img.os, img.architecture) if x)
    archive = f", archive {human_size(img.archive_size)}" if img.archive_size is not None else ""
    console.print(
        f"[bold]{escape(report.source)}[/bold]  {img.format}  {escape(tags)}  {plat}  "
        f"{human_size(img.size)} in {len(img.layers)} layer(s){archive}"
    )
    rd = report.read
    if rd.path == "direct":
        console.print(f"[dim]read in place from {rd.engine}'s {rd.storage} storage[/dim]")
    elif rd.path == "export":
        why = f" because {escape(rd.reason)}" if rd.reason else ""
        console.print(f"[dim]exported with {rd.engine} save{why}[/dim]")
    t = Table(title="Layers", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("size", justify="right")
    t.add_column("files", justify="right")
    t.add_column("wasted", justify="right")
    t.add_column("created by", overflow="fold")
    for layer in img.layers:
        cb = layer.created_by or layer.digest
        t.add_row(
            str(layer.index),
            human_size(layer.size),
            str(layer.files),
            human_size(layer.wasted) if layer.wasted else "",
            escape(cb if len(cb) <= 160 else cb[:157] + "…"),
        )
    console.print(t)
    _print_sizes(report, top)
    waste = report.waste
    if waste is None:
        return
    if not waste.categories:
        console.print("No wasted bytes found.")
    else:
        w = Table(title=f"Wasted bytes: {human_size(waste.total)}", title_justify="left")
        w.add_column("what")
        w.add_column("bytes", justify="right")
        w.add_column("files", justify="right")
        w.add_column("biggest", overflow="fold")
        for cat in waste.categories:
            biggest = "\n".join(
                f"{escape('/' + i.path)} ({human_size(i.bytes)}, layer {i.layer}"
                + (f", removed in {i.removed_in}" if i.removed_in is not None else "")
                + ")"
                for i in cat.items[:top]
            )
            if len(cat.items) > top:
                biggest += f"\n… {len(cat.items) - top} more"
            w.add_row(cat.title, human_size(cat.bytes), str(cat.files), biggest)
        console.print(w)
    for note in report.notes:
        console.print(f"[dim]{escape(note)}[/dim]")


def _print_sizes(report: InspectReport, top: int) -> None:
    """What is big: the packages that take the most of the image as it runs."""
    if not report.sizes:
        return
    total = sum(s.bytes for s in report.sizes)
    t = Table(title=f"Biggest packages (of {human_size(total)} in files)", title_justify="left")
    t.add_column("package")
    t.add_column("version")
    t.add_column("size", justify="right")
    t.add_column("share", justify="right")
    t.add_column("files", justify="right")
    for s in report.sizes[:top]:
        name = escape(s.package) if s.package else "[dim](no package)[/dim]"
        t.add_row(name, escape(s.version or ""), human_size(s.bytes), f"{100 * s.bytes / max(total, 1):.0f}%",
                  str(s.files))
    if len(report.sizes) > top:
        rest = report.sizes[top:]
        t.add_row(f"[dim]… {len(rest)} more[/dim]", "", human_size(sum(s.bytes for s in rest)),
                  f"{100 * sum(s.bytes for s in rest) / max(total, 1):.0f}%", str(sum(s.files for s in rest)))
    console.print(t)


def _print_coverage(report: InspectReport, show_binaries: bool) -> None:
    targets = report.targets
    cuda = [b for b in report.binaries if b.entries]
    n_entries = sum(len(b.device_entries) for b in cuda)
    if not cuda and report.kind != "binary":  # a CPU image: there are no GPU targets to list or check
        console.print("[bold]CPU only:[/bold] no CUDA binaries (no device code to check against GPU targets)")
        return
    console.print(
        f"[bold]CUDA binaries:[/bold] {len(cuda)} with {n_entries} device-code entries; "
        f"targets: {', '.join(str(t) for t in targets)}"
    )
    if report.kind == "binary" or show_binaries:
        _print_binaries(cuda, targets)
    if report.kind != "binary":
        p = Table(title="Per package", title_justify="left")
        p.add_column("package")
        p.add_column("version")
        p.add_column("binaries", justify="right")
        p.add_column("architectures", overflow="fold")
        for t in targets:
            p.add_column(escape(t.label), justify="center")
        for pkg in report.packages:
            cells = []
            for t in targets:
                bad = len(pkg.failing.get(t.key, ()))
                cells.append(_mark(True) if bad == 0 else f"[red]✗ {bad}[/red]")
            name = escape(pkg.package) if pkg.package else "[dim](no package)[/dim]"
            p.add_row(name, escape(pkg.version or ""), str(pkg.binaries), _archs(pkg.archs), *cells)
        console.print(p)
    failing = report.failing
    if failing:
        f = Table(
            title="No kernel image for a target (these fail with 'no kernel image is available')", title_justify="left"
        )
        f.add_column("binary", overflow="fold")
        f.add_column("package")
        f.add_column("has")
        f.add_column("fails on")
        for b in failing:
            f.add_row(escape(b.path), escape(b.package or ""), _archs(b.archs, 8), ", ".join(str(t) for t in b.failing))
        console.print(f)
    elif cuda:
        console.print("[green]Every CUDA binary has a kernel image for every target.[/green]")
    errors = report.errors
    for b in errors:
        console.print(f"[yellow]unreadable ELF file[/yellow] {escape(b.path)}: {escape(b.error or '')}")


def _print_binaries(binaries: list[BinaryReport], targets: tuple[Target, ...]) -> None:
    t = Table(title="Binaries", title_justify="left")
    t.add_column("binary", overflow="fold")
    t.add_column("package")
    t.add_column("entries", justify="right")
    t.add_column("architectures", overflow="fold")
    for tg in targets:
        t.add_column(escape(tg.label), justify="center")
    for b in binaries:
        by_target = {r.target.key: r for r in b.coverage}
        cells = []
        for tg in targets:
            r = by_target.get(tg.key)
            cell = _mark(r is not None and r.runs) if r is None or r.how != "no-kernels" else "[dim]–[/dim]"
            if r is not None and r.how == "ptx-jit":
                cell += " jit"
            if r is not None and r.embedded:
                cell += "*"
            cells.append(cell)
        compressed = sum(1 for e in b.device_entries if e.compressed)
        entries = f"{len(b.device_entries)}" + (f" ({compressed} compressed)" if compressed else "")
        t.add_row(escape(b.path), escape(b.package or ""), entries, _archs(b.archs, 16), *cells)
    console.print(t)
    if any(r.how == "no-kernels" for b in binaries for r in b.coverage):
        console.print(
            "[dim]– no image, but the device code holds no kernels (a device-link stub): nothing to fail.[/dim]"
        )
    if any(r.embedded for b in binaries for r in b.coverage):
        console.print(
            "[dim]* from fat binaries the library keeps in its own data sections and loads itself"
            " (cuFFT, cuBLAS); cuobjdump does not list them.[/dim]"
        )


def _group_key(kind: str, label: str) -> tuple[int, tuple[int, int, str]]:
    """Regular entries first, then embedded ones; LTO-IR and unknown kinds last; by arch within."""
    name = label.split(" ", 1)[0]
    rank = (0 if " " not in label else 1) if kind in ("sass", "ptx") else 2
    return rank, arch_sort_key(name) if kind in ("sass", "ptx") else (0, 0, name)


def _print_arch_summary(b: BinaryReport) -> None:
    groups: dict[tuple[str, str], list[int]] = {}
    for e in b.entries:
        g = groups.setdefault((e.kind, e.arch), [0, 0, 0])
        g[0] += 1
        g[1] += int(e.compressed)
        g[2] += e.uncompressed_size if e.compressed else e.payload_size
    t = Table(title=f"{escape(b.path)} ({b.elf_type}, found by {b.method})", title_justify="left")
    t.add_column("arch")
    t.add_column("kind")
    t.add_column("entries", justify="right")
    t.add_column("compressed", justify="right")
    t.add_column("size (uncompressed)", justify="right")
    for e in b.embedded:
        g = groups.setdefault((e.kind, f"{e.arch} (in {e.section})"), [0, 0, 0])
        g[0] += 1
        g[1] += int(e.compressed)
        g[2] += e.uncompressed_size if e.compressed else e.payload_size
    for (kind, arch), (n, nc, size) in sorted(groups.items(), key=lambda kv: _group_key(kv[0][0], kv[0][1])):
        t.add_row(arch, kind, str(n), str(nc), human_size(size))
    console.print(t)


def _print_entries(b: BinaryReport) -> None:
    t = Table(title=f"Entries of {escape(b.path)} ({b.elf_type}, found by {b.method})", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("kind")
    t.add_column("arch")
    t.add_column("compressed")
    t.add_column("size", justify="right")
    t.add_column("section")
    t.add_column("container", justify="right")
    for i, e in enumerate(b.entries, 1):
        size = e.uncompressed_size if e.compressed else e.payload_size
        t.add_row(str(i), e.kind, e.arch, e.compression or "no", human_size(size), e.section or "(scan)",
                  str(e.container))
    console.print(t)


def _provenance(engine: object, image: str) -> dict[str, object]:
    """An engine image's OCI / torchkiln labels and the SBOM `kiln build` wrote beside it."""
    from torchkiln.provenance import read_sbom

    details = engine.inspect_image(image)  # type: ignore[attr-defined]
    labels = {k: v for k, v in sorted(details.labels.items()) if k.startswith(("org.opencontainers.", "io.torchkiln."))}
    found = read_sbom(details.id)
    sbom = None if found is None else {"path": str(found[0]), **found[1]}
    return {"labels": labels, "sbom": sbom}


def _print_provenance(prov: dict[str, object]) -> None:
    labels = prov["labels"]
    assert isinstance(labels, dict)
    t = Table(title="Labels", title_justify="left")
    t.add_column("label")
    t.add_column("value", overflow="fold")
    for k, v in labels.items():
        t.add_row(escape(k), escape(v))
    console.print(t)
    sbom = prov["sbom"]
    if not isinstance(sbom, dict):
        console.print("[dim]No SBOM on this machine for this image (kiln build writes one beside every image it "
                      "builds).[/dim]")
        return
    comps = sbom["components"]
    s = Table(title=f"SBOM ({sbom['format']}, {len(comps)} components): {escape(str(sbom['path']))}",
              title_justify="left")
    s.add_column("package")
    s.add_column("version")
    s.add_column("sha256 (locked wheel)", overflow="fold")
    for c in comps:
        name = f"{c['name']} [dim](CUDA)[/dim]" if c["cuda"] else escape(str(c["name"]))
        s.add_row(name, escape(str(c["version"])), " ".join(h[:16] + "…" for h in c["sha256"]))
    console.print(s)


@app.command("inspect")
def inspect_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="An image archive (docker save), an OCI layout (directory or tar), a .whl, an ELF file"
            " (.so, executable, .o), or the name of an image in the local engine.",
            show_default=False,
            metavar="IMAGE|PATH",
        ),
    ],
    targets: Annotated[
        list[str] | None,
        typer.Option(
            "--targets",
            "-t",
            help="Target GPUs, names or compute capabilities (H100, 8.6, sm_120); repeat or separate with commas."
            " Default: the spec's gpu.targets, else a standard list.",
        ),
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Take the targets from this kiln.toml (default: ./kiln.toml).")
    ] = None,
    engine_name: EngineOpt = None,
    binaries: Annotated[bool, typer.Option("--binaries", "-b", help="List every CUDA binary.")] = False,
    entries: Annotated[bool, typer.Option("--entries", help="List every embedded entry of every binary.")] = False,
    all_sections: Annotated[
        bool,
        typer.Option("--all-sections", help="Also list relocatable device code (__nv_relfatbin), like cuobjdump -all."),
    ] = False,
    top: Annotated[
        int, typer.Option("--top", help="Rows to show: the biggest packages, and the wasted-byte items per category.")
    ] = 5,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when a CUDA binary has no kernel image for some target.")
    ] = False,
    read: Annotated[
        str,
        typer.Option(
            "--read",
            help="For an image name: 'direct' reads its layer folders in place (local engine, root, docker's"
            " overlay2 or podman's overlay storage), 'export' exports it with the engine's save first,"
            " 'auto' reads in place where it can and exports otherwise.",
            metavar="auto|direct|export",
        ),
    ] = "auto",
    json: JsonOpt = False,
) -> int:
    """Show layers, wasted bytes and the GPU architectures of every CUDA binary of an image, wheel or .so.

    For each target GPU, says whether each CUDA binary can run there (matching SASS, compatible
    SASS, or PTX the driver can JIT). Reads archives by random access; never runs or unpacks them.

    Exit codes: 0 done; 1 with --check when a binary would fail with "no kernel image"; 7 for a
    missing or damaged input; 4 for an unknown target GPU.
    """
    if read not in ("auto", "direct", "export"):
        raise typer.BadParameter(f"{read!r} is not one of auto, direct, export.", param_hint="--read")
    tg = _targets(targets, spec)
    path = Path(target).expanduser()
    provenance: dict[str, object] | None = None
    with _progress(True) as progress:
        if path.exists():
            report = inspect_path(path, tg, all_sections=all_sections, progress=progress)
        elif looks_like_path(target):
            raise InputError(
                f"{target}: no such file or directory.",
                hint="Check the path, or give the name of an image in the local docker/podman.",
            )
        else:
            from torchkiln.engines import get_engine, require_store
            from torchkiln.runner import Runner

            echo = (lambda cmd: err_console.print(f"[dim]$ {escape(cmd)}[/dim]")) if state.debug else None
            engine = require_store(get_engine(engine_setting(engine_name), Runner(echo=echo)),
                                   "save an image to inspect",
                                   "Give the path of the .sif file: kiln inspect IMAGE.sif")
            report = inspect_image_name(
                target, tg, engine, all_sections=all_sections, progress=progress, read=read  # type: ignore[arg-type]
            )
            provenance = _provenance(engine, target)
    if json:
        print_json({**report.to_dict(), **({"provenance": provenance} if provenance is not None else {})})
    else:
        if report.image is not None:
            _print_image(report, top)
        if provenance is not None:
            _print_provenance(provenance)
        elif report.kind == "wheel":
            console.print(
                f"[bold]{escape(report.source)}[/bold]  wheel  {report.platform or 'any platform'}  "
                f"{report.stats.files} files, {report.stats.elf_files} ELF files"
                + (f" ({', '.join(report.machines)})" if report.machines else "")
            )
        elif report.kind == "binary":
            b = report.binaries[0] if report.binaries else None
            console.print(
                f"[bold]{escape(report.source)}[/bold]  {b.elf_type if b else 'ELF'}  "
                f"{report.platform or (b.machine if b else '')}"
            )
        for note in report.notes if report.image is None else ():
            console.print(f"[dim]{escape(note)}[/dim]")
        _print_coverage(report, binaries)
        for b in report.binaries:
            if b.entries and entries:
                _print_entries(b)
            elif b.entries and report.kind == "binary":
                _print_arch_summary(b)
    if check and report.failing:
        return int(ExitCode.CHECK_FAILED)
    return int(ExitCode.OK)
