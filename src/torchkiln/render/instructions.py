"""Dockerfile instructions the renderers share: quoting, RUN with mounts, the mounts themselves.

``render/dockerfile.py`` (the stages) and ``render/extensions.py`` (the compiling stages) both write
with these, so neither imports the other. Pure text.
"""

from __future__ import annotations

import json

from torchkiln.contract import SECRET_CA, SECRET_UV

SHELL = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]'


def quote(value: str) -> str:
    """Quote a value for ENV/LABEL lines (JSON string quoting is valid Dockerfile quoting)."""
    return json.dumps(value)


def run(mounts: list[str], commands: list[str]) -> list[str]:
    """A RUN instruction: one mount per line, then the commands joined with ``&&``."""
    parts = [f"--mount={m}" for m in mounts] + [commands[0]] + [f"&& {c}" for c in commands[1:]]
    lines = ["RUN " + parts[0]]
    lines += [f"    {p}" for p in parts[1:]]
    return [line + " \\" for line in lines[:-1]] + [lines[-1]]


def bind(name: str) -> str:
    return f"type=bind,source=.kiln/{name},target=/kiln/{name}"


UV_CACHE_MOUNT = "type=cache,target=/root/.cache/uv,sharing=locked"
SOURCE_MOUNTS = [
    bind("bin/uv"),
    bind("sources.sh"),
    bind("wheels"),
    UV_CACHE_MOUNT,
    f"type=secret,id={SECRET_UV},target=/run/secrets/{SECRET_UV}",
    f"type=secret,id={SECRET_CA},target=/run/secrets/{SECRET_CA}",
]
APT_MOUNTS = [
    "type=cache,target=/var/cache/apt,sharing=locked",
    "type=cache,target=/var/lib/apt/lists,sharing=locked",
]


def apt_install(packages: tuple[str, ...] | list[str]) -> list[str]:
    return run(
        APT_MOUNTS,
        [
            "rm -f /etc/apt/apt.conf.d/docker-clean",
            "apt-get update",
            "apt-get install -y --no-install-recommends " + " ".join(packages),
        ],
    )
