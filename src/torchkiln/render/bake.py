"""A ``[matrix]`` as a ``docker buildx bake`` file (JSON): one target per cell, a group of all of them.

Pure: the resolved cells in, the text out (same cells, same bytes). Each target builds the cell's
own context folder (``bake_context`` in ``torchkiln.building.context`` writes them next to the file):
``context`` is that folder, relative to the bake file's folder (run ``docker buildx bake`` there),
``target`` the runtime stage, ``tags`` the cell's reference (docs/matrix.md, "Tags"),
``platforms`` its platform. Only keys of bake's documented target schema are written;
tests/unit/test_render_bake.py checks every key and type against it. Package sources are not in
the file: they reach a kiln build as BuildKit secrets (``kiln-uv``, ``kiln-ca``), and bake takes them
the same way (``--set '*.secret=id=kiln-uv,src=uv.toml'``); without them the builds use the
default index. Cells that differ only by platform stay separate targets (bake pushes one manifest
list per target, and their contexts differ); ``kiln build --matrix --push`` joins them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from torchkiln.matrix import ResolvedCell

BAKE_FILE = "docker-bake.json"
#: the names bake accepts for targets and groups
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def target_name(rc: ResolvedCell) -> str:
    """``cell1-torch2_13_0-cpu-py3_11``: the cell's number and tag, in bake's name alphabet."""
    return f"cell{rc.cell.index}-" + _NAME.sub("_", rc.tag.replace(".", "_")).strip("_")


def bake_document(cells: Sequence[ResolvedCell], target: str = "runtime") -> dict[str, Any]:
    """The bake file as data: ``group.default`` lists every cell's target."""
    targets: dict[str, Any] = {}
    for rc in cells:
        assert rc.plan is not None, "impossible cells are left out before rendering"
        name = target_name(rc)
        targets[name] = {
            "context": name,
            "dockerfile": "Dockerfile",
            "target": target,
            "tags": [rc.image],
            "platforms": [rc.plan.platform],
            "description": rc.cell.label,
        }
    return {"group": {"default": {"targets": list(targets)}}, "target": targets}


def render_bake(cells: Sequence[ResolvedCell], target: str = "runtime") -> str:
    return json.dumps(bake_document(cells, target), indent=2) + "\n"
