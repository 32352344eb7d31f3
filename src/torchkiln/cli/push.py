"""`kiln push IMAGE|SPEC [--to REF]`: push a built image to a registry with the engine's own login.

torchkiln never takes a registry password: the engine reads what `docker login` / `podman login`
stored. With ``--to`` the image is first tagged with that reference (a registry's ``HOST:PORT/NAME:TAG``).
A push that fails part-way leaves blobs in the registry but no tag: the tag names the whole image or
nothing new. Errors: 12 when the registry cannot be reached (or its TLS certificate is not trusted),
13 when it refuses the credentials.
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
                     "lack). zstd pushes through podman, which must be installed."),
    ] = "gzip",
    engine_name: EngineOpt = None,
    json: JsonOpt = False,
) -> None:
    """Push an image (or a spec's built image) to its registry, with the engine's own login."""
    from torchkiln.engines.podman import COMPRESSIONS

    if compression not in COMPRESSIONS:
        raise typer.BadParameter(f"{compression!r} is not one of {', '.join(COMPRESSIONS)}", param_hint="--compression")
    engine = require_store(get_engine(engine_setting(engine_name), make_runner()), "push an image by tag",
                           "Push the file: apptainer push IMAGE.sif oras://REGISTRY/NAME:TAG")
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
    digest = engine.push(ref, compression)
    if json:
        print_json({"image": ref, "source": source, "digest": digest, "compression": compression,
                    "engine": engine.info.to_dict()})
        return
    console.print(f"[bold green]pushed[/bold green] {escape(ref)}" + (f" ({digest})" if digest else ""),
                  highlight=False)
