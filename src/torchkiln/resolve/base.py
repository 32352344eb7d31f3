"""Which Python a base image can give: the distribution's own archive (``[base] python = "apt"``), and the
free-threaded builds (3.13t, 3.14t) that no official Python image and no Debian or Ubuntu archive carries.

Pure: the facts are ``knowledge/distros.toml``; the image is judged by its reference only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

#: where a free-threaded CPython comes from when the base has none: uv installs python-build-standalone's
#: build (``uv python install 3.13t``) into this folder, with ``python3.13t`` in /usr/local/bin
PYTHON_INSTALL_DIR = "/opt/kiln/python"
#: the base of such plans: the Debian release of torchkiln's other defaults, without a Python of its own
FREE_THREADED_BASE = "debian:bookworm-slim"


@dataclass(frozen=True)
class Distro:
    name: str
    names: tuple[str, ...]
    python: tuple[str, ...]
    source: str


@cache
def distros() -> tuple[Distro, ...]:
    text = resources.files("torchkiln.knowledge").joinpath("distros.toml").read_text(encoding="utf-8")
    return tuple(Distro(d["name"], tuple(d["names"]), tuple(d["python"]), d["source"])
                 for d in tomllib.loads(text)["distro"])


def distro_of(image: str) -> Distro | None:
    """The distribution release an image reference names (``nvidia/cuda:12.6.3-runtime-ubuntu22.04``,
    ``ubuntu:22.04``, ``debian:bookworm-slim``, ``kiln-base:bookworm``), else None (not known)."""
    name, _, tag = image.lower().rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image.lower(), "", "")
    words = set(re.split(r"[-_]", tag))  # bookworm, ubuntu22.04, ...
    repo = name.rsplit("/", 1)[-1]
    if repo in ("ubuntu", "debian"):  # ubuntu:22.04, debian:12-slim
        words.add(repo + tag.split("-")[0])
    return next((d for d in distros() if words & set(d.names)), None)


def official_python_image(image: str) -> bool:
    """``python:3.13-slim-bookworm`` and the like: Docker's official images, built with the GIL only
    (no free-threaded variant: docker-library/python#1082)."""
    return re.match(r"^(?:docker\.io/)?(?:library/)?python:", image.lower()) is not None
