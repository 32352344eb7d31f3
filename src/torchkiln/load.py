"""Spec → plan, the first two steps every command shares."""

from __future__ import annotations

from pathlib import Path

from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.resolve import resolve
from torchkiln.spec import Spec, load_spec


def load_plan(path: Path) -> tuple[Spec, BuildPlan, Path]:
    """Load and resolve a spec; returns (spec, plan, the folder that holds the spec)."""
    p = path / "kiln.toml" if path.is_dir() else path
    spec = load_spec(p)
    return spec, resolve(spec, load_knowledge()), p.parent
