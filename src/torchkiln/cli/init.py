"""`kiln init`: write a commented starter kiln.toml."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import typer

from torchkiln.cli import app
from torchkiln.cli._common import console
from torchkiln.errors import FilesError, KilnError, OutputError
from torchkiln.fsio import write_atomic

STARTER = '''\
# kiln.toml — the one spec torchkiln builds an image from. Every key is optional unless marked.
# `kiln resolve` checks it, `kiln explain` says why each choice was made, `kiln render` writes
# the Dockerfile, `kiln build` builds it.

[image]
name = "{name}"                # required: the image name (lowercase)
tag = "latest"

[python]
version = "3.11"               # a Python minor version torch ships wheels for ("3.13t"/"3.14t": free-threaded)
# precompile = ["torch._dynamo", "torch._inductor.compile_fx"]   # bytecode for torch.compile too; or "all"

[torch]
version = ">=2.5"              # an exact version ("2.5.1") or a PEP 440 specifier; empty = newest known
cuda = "auto"                  # a CUDA variant ("12.4", "cu124"), "auto" (best for targets/driver), or "cpu"
packages = ["torchvision"]     # companions (torchvision, torchaudio), versions matched to torch

[gpu]
targets = ["A100", "H100"]     # GPU names or compute capabilities ("8.0"); `kiln explain --gpus` lists names
# min_driver = "535.104"       # the oldest NVIDIA driver the image must still run on
# forward_compat = true        # data-center GPUs: NVIDIA's cuda-compat runs a newer CUDA on that older driver
ptx = true                     # keep PTX of the newest target for forward compatibility

[packages]
pip = []                       # e.g. ["transformers>=4.40"]; cannot replace torch (constraints file)
apt = []                       # Debian/Ubuntu packages for the runtime image, e.g. ["libgl1"]

# [[extensions]]               # compiled against the installed torch, after it
# name = "flash-attn"
# version = "2.7.4.post1"

[app]
copy = []                      # paths next to this file copied into workdir, last (cache-friendly)
workdir = "/workspace"
command = ["python"]
# entrypoint = ["python", "serve.py"]   # with an entrypoint, command is its arguments
# expose = [8000]
# healthcheck = {{ command = ["curl", "-f", "http://localhost:8000/"], interval = "30s" }}
user = "kiln"                  # the runtime user; non-root by default ("root" to opt out)

# [[steps]]                    # a command of your own: after "system", "torch", "packages" or "app"
# after = "packages"           # (rendered as written, linted when the spec is resolved: docs/steps.md)
# run = "uv pip install ./mylib"

[base]
image = ""                     # override the base image, e.g. a local one for air-gapped builds
python = "image"               # "image": the base has python<version>; "apt": install it with apt

[sources]                      # where packages come from at build time; never stored in the image
# index_url = "https://pypi.example.internal/simple"
# find_links = ["wheels"]
# torch_index = "https://torch-mirror.example.internal/whl/{{variant}}"
network = "default"            # "host" to build with host networking
'''


def init_target(path: Path) -> Path:
    """The file `kiln init PATH` writes: PATH itself when it names a .toml file, else PATH/kiln.toml.

    ``kiln init myproj`` and ``kiln init newdir/`` mean a project folder (a trailing slash does not
    survive ``Path``), so anything that is not an existing file or a ``.toml`` name is a folder.
    """
    if path.is_dir():
        return path / "kiln.toml"
    if path.is_file() or path.suffix == ".toml":
        return path
    return path / "kiln.toml"


@app.command("init")
def init_cmd(
    path: Annotated[
        Path,
        typer.Argument(help="Where to write the spec: a .toml file, or a folder (created if missing) that gets "
                       "kiln.toml.", show_default=False),
    ] = Path("kiln.toml"),
    name: Annotated[str | None, typer.Option("--name", help="Image name to put in the spec (default: acme/trainer; "
                                                       "with --from, the project's name).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    from_: Annotated[
        Path | None,
        typer.Option("--from", help="An existing repository: its pyproject.toml / uv.lock / requirements*.txt "
                                    "become a \\[project] table, its Dockerfile maps onto the spec; written in that "
                                    "folder (PATH defaults to FOLDER/kiln.toml); what cannot be mapped is listed.",
                     show_default=False),
    ] = None,
) -> None:
    """Write a commented starter kiln.toml, or (--from FOLDER) one read from an existing repository."""
    if from_ is not None:
        _init_from(from_, path, name, force)
        return
    name = name or "acme/trainer"
    target = init_target(path)
    if target.exists() and not force:
        raise KilnError(f"{target} already exists.", hint="Use --force to overwrite it, or give another path.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise OutputError(f"{target.parent} is not a folder (a file is in the way).",
                        hint="Give a folder, or a path ending in .toml.") from None
    except OSError as e:
        raise OutputError(f"cannot write {target} ({e.strerror}).",
                          hint="Check the path and its permissions.") from None
    _write_spec(target, STARTER.format(name=name), exclusive=not force)
    console.print(f"wrote {target}; check it with: kiln resolve {target}")


def _write_spec(target: Path, text: str, *, exclusive: bool) -> None:
    """Write a spec whole or not at all (fsio: temp in the same folder, fsync, rename): a full disk leaves no
    empty kiln.toml behind; ``exclusive``: an existing file is an error, not overwritten."""
    try:
        write_atomic(target, text, what="spec", exclusive=exclusive)
    except FileExistsError:
        raise KilnError(f"{target} already exists.",
                        hint="Use --force to overwrite it, or give another path.") from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise FilesError(f"cannot write {target}: {e.strerror}; nothing was written.",
                             hint=f"Free space on the disk of {target.parent}, or give a path on another disk."
                             ) from None
        raise OutputError(f"cannot write {target} ({e.strerror}).",
                          hint="Check the path and its permissions.") from None


def _init_from(folder: Path, path: Path, name: str | None, force: bool) -> None:
    from torchkiln.starter import has_tool_kiln, image_name, render_starter, starter_from

    target = folder / "kiln.toml" if path == Path("kiln.toml") else init_target(path)
    if target.resolve().parent != folder.resolve():
        raise KilnError(f"{target} is not in {folder}: the spec's [app] copy paths are relative to the folder that "
                        "holds it.", hint=f"Leave PATH out (it writes {folder / 'kiln.toml'}), or give a .toml file "
                        "in that folder.")
    if target.exists() and not force:
        raise KilnError(f"{target} already exists.", hint="Use --force to overwrite it, or give another path.")
    if has_tool_kiln(folder) and not force:
        raise KilnError(f"{folder / 'pyproject.toml'} already holds a kiln spec ([tool.kiln]): `kiln resolve {folder}` "
                        "and `kiln build` use it as it is; nothing was written.",
                        hint="Edit [tool.kiln] in pyproject.toml, or use --force to write kiln.toml beside it "
                             "(kiln.toml then wins over [tool.kiln]).")
    st = starter_from(folder)
    if name:
        st.name = image_name(name) if "/" not in name else name
    text = render_starter(st, folder)
    _write_spec(target, text, exclusive=not force)
    console.print(f"wrote {target} from {', '.join(st.sources)} in {folder}", highlight=False, markup=False)
    for f in st.fixed:
        console.print(f"  changed so that it resolves: {f}", highlight=False, markup=False)
    if st.unmapped:
        console.print(f"  not mapped onto a table ({len(st.unmapped)}; each RUN among them is a [[steps]] entry):",
                      highlight=False, markup=False)
        for u in st.unmapped:
            console.print(f"    - {u}", highlight=False, markup=False)
    console.print(f"check it with: kiln resolve {target}", highlight=False, markup=False)
