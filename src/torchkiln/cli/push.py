"""`kiln push IMAGE|SPEC [--to REF] [--compression F]`: push a built image with the engine's own login.

torchkiln never takes a registry password: the engine reads what `docker login` / `podman login`
stored. With ``--to`` the image is first tagged with that reference (a registry's ``HOST:PORT/NAME:TAG``).
A push that fails part-way leaves blobs in the registry but no tag: the tag names the whole image or
nothing new. Errors: 12 when the registry cannot be reached (or its TLS certificate is not trusted),
13 when it refuses the credentials, 11 when ``--compression`` needs a tool that is not installed
(checked before anything is saved or pushed; see ``engines/compress.py``).

``--first-run FILE`` (estargz only): the record ``kiln verify IMAGE --record-first-run FILE`` wrote;
its files are placed first in each layer for the stargz snapshotter to prefetch. A record with any
other compression, or one that is missing, unreadable or not a record, is exit 7 before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json
from torchkiln.cli.build import EngineOpt, Target, make_runner, missing_image
from torchkiln.cli.config import engine_setting
from torchkiln.engines import get_engine, require_store
from torchkiln.errors import InputError
from torchkiln.settings import effective


def _is_spec(value: str) -> bool:
    p = Path(value)
    return p.suffix == ".toml" and p.is_file() or (p.is_dir() and (p / "kiln.toml").is_file())


def registry_ref(source: str, registry: str | None) -> str | None:
    """``acme/trainer:1`` under the ``registry`` setting (``localhost:5000`` → ``localhost:5000/acme/trainer:1``);
    None when no registry is set or the image already names one."""
    if not registry:
        return None
    first = source.split("/", 1)[0]
    if "/" in source and ("." in first or ":" in first or first == "localhost"):
        return None
    return f"{registry.rstrip('/')}/{source}"


@app.command("push")
def push_cmd(
    image: Annotated[str, typer.Argument(help="An image reference, or a kiln.toml (or its folder): the image it "
                                              "builds.", show_default=False)],
    to: Annotated[
        str | None,
        typer.Option("--to", help="Tag the image with this reference first and push that (HOST:PORT/NAME:TAG; "
                                  "default: the image under the registry setting, `kiln config`, when set).",
                     show_default=False),
    ] = None,
    target: Annotated[Target, typer.Option("--target", help="With a spec: which image, runtime or dev.")] = "runtime",
    compression: Annotated[
        str,
        typer.Option("--compression", help="Layer compression: gzip (every runtime reads it), zstd or zstd:chunked "
                     "(smaller and faster to unpack; zstd:chunked also lets podman/CRI-O pull only the files they "
                     "lack). zstd pushes through podman, which must be installed. estargz: lazy pulling with the "
                     "stargz snapshotter (ctr-remote converts, skopeo pushes)."),
    ] = "gzip",
    first_run: Annotated[
        Path | None,
        typer.Option("--first-run", metavar="FILE",
                     help="With --compression estargz: place the files this record names first in each layer, so "
                          "the stargz snapshotter prefetches them at start (record it with `kiln verify IMAGE "
                          "--record-first-run FILE`; ctr-remote's JSON-lines record format).",
                     show_default=False),
    ] = None,
    engine_name: EngineOpt = None,
    json: JsonOpt = False,
) -> None:
    """Push an image (or a spec's built image) to its registry, with the engine's own login."""
    from torchkiln.engines.compress import COMPRESSIONS, check_tools

    if compression not in COMPRESSIONS:
        raise typer.BadParameter(f"{compression!r} is not one of {', '.join(COMPRESSIONS)}", param_hint="--compression")
    first_run_files = 0
    if first_run is not None:  # before any engine or tool is looked at
        from torchkiln.verify.record import read_record

        if compression != "estargz":
            raise InputError(f"--first-run places files first in eStargz layers; --compression {compression} has "
                             "no such order, so nothing was pushed.",
                             hint="Push with --compression estargz --first-run FILE, or leave out --first-run.")
        first_run_files = len(read_record(first_run))
    engine = require_store(get_engine(engine_setting(engine_name), make_runner()), "push an image by tag",
                           "Push the file: apptainer push IMAGE.sif oras://REGISTRY/NAME:TAG")
    check_tools(engine.name, compression)  # before the slow save and push (exit 11)
    source = image
    if _is_spec(image):
        from torchkiln.contract import image_ref
        from torchkiln.load import load_plan

        _, plan, _ = load_plan(Path(image))
        source = image_ref(plan, target)
    if not engine.image_exists(source):
        if _is_spec(image):
            raise missing_image(source, engine.name, Path(image), target)
        raise InputError(f"the image {source} does not exist in {engine.name}.",
                         hint="Build it first (kiln build SPEC), or check the name with `docker images`.")
    if to is None:
        to = registry_ref(source, effective().registry)
    ref = to or source
    if to:
        engine.tag(source, to)
    digest = engine.push(ref, compression, first_run=first_run)
    if json:
        print_json({"image": ref, "source": source, "digest": digest, "compression": compression,
                    "first_run": {"record": str(first_run), "files": first_run_files} if first_run else None,
                    "engine": engine.info.to_dict()})
        return
    placed = f", {first_run_files:,} first-run files placed first" if first_run else ""
    console.print(f"[bold green]pushed[/bold green] {escape(ref)}" + (f" ({digest})" if digest else "")
                  + escape(placed), highlight=False)
