"""The Python distributions installed in an image's venv, read from its layer folders in place.

What ``importlib.metadata.distributions()`` would list inside the image for the venv's
site-packages (name, version, license expression, the sha256 of the RECORD text), without starting
a container: the SBOM of every ``kiln build`` needs it, and a container run costs about half a
second on this kind of machine (seconds for an arm64 image under emulation).

The layer folders are those of :mod:`torchkiln.images.storage` (base first). A path's content is
the topmost layer's that has it, unless a layer above deletes it or one of its folders (a 0/0
character device or a ``.wh.`` entry) or marks one of its folders opaque (then nothing below that
layer counts): the rules of an overlay mount, applied to the few files asked for.

Our own code: no library reads package metadata from overlay layer folders.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from torchkiln.images.storage import _is_opaque

_SUFFIXES = (".dist-info", ".egg-info")


def _whiteout(layer: Path, rel: str) -> bool:
    """Whether ``layer`` deletes ``rel`` (a 0/0 character device, or a ``.wh.NAME`` beside it)."""
    path = layer / rel
    try:
        st = os.lstat(path)
    except OSError:
        parent, _, name = rel.rpartition("/")
        return (layer / parent / f".wh.{name}").exists() if name else False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def resolve(layers: Sequence[Path], rel: str) -> Path | None:
    """The file ``rel`` (relative to the root, no leading slash) as the image shows it, or None."""
    parts = rel.split("/")
    for layer in reversed(layers):
        # a deleted or opaque folder on the way hides every lower layer's copy
        for i in range(1, len(parts)):
            if _whiteout(layer, "/".join(parts[:i])):
                return None
        path = layer / rel
        if _whiteout(layer, rel):
            return None
        if path.is_file() and not path.is_symlink():
            return path
        if any(_is_opaque(str(layer / "/".join(parts[:i]))) for i in range(1, len(parts))
               if (layer / "/".join(parts[:i])).is_dir()):
            return None
    return None


def _site_dirs(layers: Sequence[Path], venv: str) -> list[str]:
    found: set[str] = set()
    for layer in layers:
        lib = layer / venv / "lib"
        if lib.is_dir():
            for py in lib.iterdir():
                if py.name.startswith("python3") and (py / "site-packages").is_dir():
                    found.add(f"{venv}/lib/{py.name}/site-packages")
    return sorted(found)


def _text(path: Path) -> str:
    # as importlib.metadata reads it: UTF-8, universal newlines
    return path.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def venv_distributions(layers: Sequence[Path], venv: str = "/opt/venv") -> list[dict[str, str]] | None:
    """The venv's distributions as ``SBOM_SCRIPT`` prints them (sorted), or None without such a venv."""
    venv = venv.strip("/")
    if resolve(layers, f"{venv}/pyvenv.cfg") is None:
        return None
    out = []
    parser = email.parser.HeaderParser()
    for site in _site_dirs(layers, venv):
        names: set[str] = set()
        for layer in layers:
            folder = layer / site
            if folder.is_dir():
                names.update(n for n in os.listdir(folder) if n.endswith(_SUFFIXES))
        for name in sorted(names):
            meta = resolve(layers, f"{site}/{name}/{'METADATA' if name.endswith('.dist-info') else 'PKG-INFO'}")
            if meta is None:
                continue
            msg = parser.parsestr(_text(meta))
            record = resolve(layers, f"{site}/{name}/RECORD")
            rec = _text(record) if record is not None else ""
            out.append({"name": msg.get("Name") or "", "version": msg.get("Version") or "",
                        "license": msg.get("License-Expression") or "",
                        "record_sha256": hashlib.sha256(rec.encode()).hexdigest() if rec else ""})
    return sorted(out, key=lambda x: (x["name"].lower(), x["version"]))
