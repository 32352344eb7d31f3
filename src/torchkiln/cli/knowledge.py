"""`kiln knowledge update` / `kiln knowledge show`: learn torch releases from the indexes into the local overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from torchkiln.building.sources import Sources, layer_from_flags, local_folder, resolve_sources
from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, err_console, print_json, spec_path
from torchkiln.errors import KilnError
from torchkiln.knowledge import PLATFORMS
from torchkiln.knowledge.learn import PYPI, UpdateReport, update_overlay
from torchkiln.knowledge.overlay import overlay_path, read_overlay

knowledge_app = typer.Typer(
    name="knowledge", no_args_is_help=True,
    help="Learn torch releases that torchkiln's built-in rows do not have yet, from the package indexes.",
)
app.add_typer(knowledge_app, name="knowledge")


def index_list(sources: Sources, torch_indexes: list[str] | None = None) -> list[str]:
    """The indexes to read: the default index (PyPI when none is set), the extra ones, the torch
    index(es) and local wheel folders (find-links), each once."""
    out = [sources.index_url or PYPI, *sources.extra_index_urls,
           *(torch_indexes or ([sources.torch_index] if sources.torch_index else [])),
           *(f for f in sources.find_links if local_folder(f) is not None)]
    return list(dict.fromkeys(out))


def _platforms(value: list[str] | None) -> tuple[str, ...]:
    if not value:
        return ("x86_64", "aarch64")
    out = []
    for v in value:
        host = PLATFORMS.get(v, v)
        if host not in PLATFORMS.values():
            raise typer.BadParameter(f"{v!r}: give linux/amd64, linux/arm64, x86_64 or aarch64")
        out.append(host)
    return tuple(dict.fromkeys(out))


def _print_report(r: UpdateReport) -> None:
    for w in r.learned:
        what = f"cu{w.cuda.replace('.', '')}" if w.cuda != "cpu" else "CPU build"
        console.print(Text(f"learned torch {w.version}{'+' + w.label if w.label else ''} {w.platform}: {what}"
                           f"{' SASS ' + w.arch_list if w.arch_list else ''}; Python {', '.join(w.python)} "
                           f"— {w.filename} sha256={w.sha256[:12]}…"))
    for c in r.companions:
        console.print(Text(f"learned {c.package} {c.version} for torch {c.torch} — {c.filename}"))
    for n in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(n)}")
    if r.written:
        console.print(f"[bold green]wrote[/bold green] {escape(str(r.path))} in {r.seconds:.1f} s "
                      f"({r.transferred / 1e6:.0f} MB read)", highlight=False)
    else:
        console.print(f"[bold green]up to date[/bold green]: the indexes ({escape(', '.join(r.indexes))}) have no "
                      f"torch release or variant torchkiln does not know ({r.seconds:.1f} s)", highlight=False)


@knowledge_app.command("update")
def update_cmd(
    spec: Annotated[Path | None, typer.Argument(help="A kiln.toml whose \\[sources] to read (optional).",
                                                show_default=False)] = None,
    index_url: Annotated[
        str | None, typer.Option("--index-url", help="Package index (URL or local PEP 503 folder).")] = None,
    extra_index_url: Annotated[
        list[str] | None, typer.Option("--extra-index-url", help="Additional index (repeatable).")] = None,
    find_links: Annotated[list[str] | None, typer.Option("--find-links", help="Wheel folder (repeatable).")] = None,
    torch_index: Annotated[list[str] | None, typer.Option(
        "--torch-index",
        help="Index of a torch variant, e.g. https://download.pytorch.org/whl/cu130 (repeatable).")] = None,
    ca_bundle: Annotated[str | None, typer.Option("--ca-bundle", help="PEM CA bundle for the indexes.")] = None,
    sources_from_pip: Annotated[
        bool | None, typer.Option("--sources-from-pip/--no-sources-from-pip",
                                  help="Use this machine's pip configuration as the lowest layer (default: the "
                                       "sources_from_pip setting, `kiln config`).", show_default=False)
    ] = None,
    platform: Annotated[list[str] | None, typer.Option(
        "--platform",
        help="Only this platform's wheels: linux/amd64 or linux/arm64 (repeatable; default both).")] = None,
    reset: Annotated[
        bool, typer.Option("--reset", help="Start a new overlay (drops what was learned before).")] = False,
    json: JsonOpt = False,
) -> None:
    """Learn the torch releases and variants the built-in rows lack from the package indexes, into the local overlay.

    One wheel of each new (version, variant, platform) is measured with HTTP range reads (torch/version.py and
    libtorch_cuda.so's fat binaries: CUDA version and compiled architectures; the index listing gives the
    Python versions) and paired with its torchvision/torchaudio; each row cites its wheel's URL and sha256.
    `kiln resolve` and `kiln explain` then use them.

    Indexes: flags > KILN_* environment > the spec's \\[sources] > the user's settings (`kiln config`) > (with
    --sources-from-pip) pip's configuration; the default index is PyPI when none is set. Exit 9 when an index
    cannot be read.
    """
    plats = _platforms(platform)
    flags = layer_from_flags(index_url=index_url, extra_index_urls=extra_index_url or (), find_links=find_links or (),
                             torch_index=torch_index[0] if torch_index else None, ca_bundle=ca_bundle, cwd=Path.cwd())
    spec_sources: Any = None
    spec_dir = Path.cwd()
    if spec is not None:
        from torchkiln.spec import load_spec

        p = spec_path(spec)
        spec_sources, spec_dir = load_spec(p).sources, p.parent.resolve()
    from torchkiln.cli.build import make_runner
    from torchkiln.cli.config import command_settings
    from torchkiln.settings import user_source_layer

    settings = command_settings(spec, sources_from_pip=sources_from_pip)
    sources = resolve_sources(flags=flags, plan_sources=spec_sources, spec_dir=spec_dir,
                              from_pip=settings.sources_from_pip, runner=make_runner(),
                              user=user_source_layer(settings))
    indexes = index_list(sources, torch_index)
    log = (lambda _line: None) if json else (lambda line: err_console.print(Text(line, style="dim")))
    report = update_overlay(indexes, ca_bundle=sources.ca_bundle, platforms=plats, reset=reset, log=log)
    if json:
        print_json(report.to_dict())
        return
    _print_report(report)


@knowledge_app.command("show")
def show_cmd(json: JsonOpt = False) -> None:
    """List what the local overlay adds to the built-in rows (the releases, variants and companions learned)."""
    path = overlay_path()
    ov = read_overlay(path)
    if json:
        print_json({"overlay": str(path), "exists": path.exists(), **ov.model_dump()})
        return
    if not path.exists():
        console.print(f"no overlay at {escape(str(path))}: only the built-in rows are used "
                      "(`kiln knowledge update` learns newer releases)", highlight=False)
        return
    t = Table(title=f"{path} (updated {ov.updated})", title_justify="left")
    for c in ("torch", "platform", "CUDA", "arch list", "Python", "wheel"):
        t.add_column(c, overflow="fold")
    for w in ov.wheels:
        t.add_row(*(Text(x) for x in (f"{w.version}{'+' + w.label if w.label else ''}", w.platform, w.cuda,
                                      w.arch_list, ", ".join(w.python), f"{w.url} sha256={w.sha256}")))
    console.print(t)
    for comp in ov.companions:
        console.print(Text(f"{comp.package} {comp.version} for torch {comp.torch} — {comp.url}"))


def learn_before_lock(spec: Path, flags: Any, from_pip: bool, runner: Any, quiet: bool, user: Any = None) -> None:
    """The `kiln knowledge update` step of `kiln lock` (online anyway): learn what the spec's indexes have
    for its platform. Never fails the lock: an index that cannot be read is a warning here (uv reports
    it in the lock step itself)."""
    from torchkiln.spec import load_spec

    p = spec_path(spec)
    try:
        s = load_spec(p)
    except KilnError:
        return  # load_plan reports it
    sources = resolve_sources(flags=flags, plan_sources=s.sources, spec_dir=p.parent.resolve(), from_pip=from_pip,
                              runner=runner, user=user)
    host = PLATFORMS.get(s.image.platform or "linux/amd64", "x86_64")
    try:
        report = update_overlay(index_list(sources), ca_bundle=sources.ca_bundle, platforms=(host,))
    except (KilnError, OSError) as e:  # e.g. an unreachable index, or a cache folder that cannot be written
        if not quiet:
            why = e.message if isinstance(e, KilnError) else str(e)
            err_console.print(f"[yellow]warning:[/yellow] knowledge not updated: {escape(why)}", highlight=False)
        return
    if not quiet and report.written:
        for w in report.learned:
            err_console.print(Text(f"learned torch {w.version}{'+' + w.label if w.label else ''} {w.platform} "
                                   f"into {report.path}"))
