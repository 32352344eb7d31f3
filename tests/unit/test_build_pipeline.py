"""The pure parts of `kiln build`: image references, stage summaries, cache counts, context folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.building.execute import cache_counts, summarize_stages
from torchkiln.building.invocation import default_context_dir
from torchkiln.contract import image_ref
from torchkiln.engines.engine import StepRecord
from torchkiln.load import load_plan

ROOT = Path(__file__).resolve().parents[2]


def _step(step: str, stage: str, name: str, status: str, secs: float | None) -> StepRecord:
    return StepRecord(step, stage, name, status, secs)  # type: ignore[arg-type]


STEPS = (
    _step("#1", "internal", "load build definition", "done", 0.1),
    _step("#4", "base", "FROM docker.io/library/kiln-base:bookworm", "done", 0.0),
    _step("#5", "runtime", "RUN useradd kiln", "cached", 0.0),
    _step("#7", "torch", "RUN uv pip install torch", "done", 41.5),
    _step("#8", "runtime", "COPY --from=torch /opt/venv /opt/venv", "done", 9.0),
    _step("#9", "runtime", "COPY apps/cpu_app.py /workspace/apps/cpu_app.py", "done", 0.1),
    _step("#10", "export", "exporting to image", "done", 6.1),
)


def test_summarize_stages_in_order_of_appearance() -> None:
    stages = summarize_stages(STEPS)
    assert [(s.name, round(s.seconds, 1), s.steps, s.cached) for s in stages] == [
        ("base", 0.0, 1, 0),
        ("runtime", 9.1, 3, 1),
        ("torch", 41.5, 1, 0),
    ]


def test_cache_counts_leave_out_from_and_internal_steps() -> None:
    assert cache_counts(STEPS) == (1, 3)


def test_image_ref() -> None:
    _spec, plan, _ = load_plan(ROOT / "examples" / "cpu.toml")
    assert image_ref(plan, "runtime") == "torchkiln/example-cpu:latest"
    assert image_ref(plan, "dev") == "torchkiln/example-cpu:latest-dev"
    assert image_ref(plan, "dev", "x/y:z") == "x/y:z"


def test_context_dir_is_stable_per_spec_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    _spec, plan, spec_dir = load_plan(ROOT / "examples" / "cpu.toml")
    a = default_context_dir(plan, spec_dir)
    assert a == default_context_dir(plan, spec_dir)
    assert a.parent == tmp_path / "contexts"
    assert a.name.startswith("torchkiln-example-cpu-")
    assert default_context_dir(plan, tmp_path) != a
