"""Spec → plan (or, with ``[matrix]``, one plan per cell): the first two steps every command shares."""

from __future__ import annotations

from pathlib import Path

from torchkiln.errors import SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.matrix import ResolvedCell, cell_tags, expand, resolve_matrix
from torchkiln.plan import BuildPlan
from torchkiln.resolve import resolve
from torchkiln.spec import Spec, load_spec


def load_plan(path: Path) -> tuple[Spec, BuildPlan, Path]:
    """Load and resolve a spec; returns (spec, plan, the folder that holds the spec)."""
    p = path / "kiln.toml" if path.is_dir() else path
    spec = load_spec(p)
    return spec, resolve(spec, load_knowledge()), p.parent


def load_matrix(path: Path) -> tuple[Spec, tuple[ResolvedCell, ...], Path]:
    """Load a spec with a ``[matrix]`` and resolve every cell (impossible cells keep their error).

    Returns (spec, cells with their tags, the folder that holds the spec). Two cells that would be
    the same image are a ``SpecError``; a spec without ``[matrix]`` is one too (``--matrix`` asks for one).
    """
    p = path / "kiln.toml" if path.is_dir() else path
    spec = load_spec(p)
    if spec.matrix is None:
        raise SpecError(
            f"{p} has no [matrix] table, and --matrix builds the cells of one.",
            hint="Drop --matrix to use the spec as it is, or add a [matrix] table (docs/matrix.md), e.g. "
                 '`python = ["3.11", "3.12"]` under [matrix].',
        )
    cells = expand(spec, origin=str(p))
    return spec, cell_tags(spec, resolve_matrix(cells, load_knowledge()), origin=str(p)), p.parent
