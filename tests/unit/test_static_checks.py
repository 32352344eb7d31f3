"""ruff and ``mypy --strict`` stay clean over src/torchkiln (scripts/static_checks.py, as .ci/run runs it)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "static_checks.py"


@pytest.mark.slow
def test_ruff_and_mypy_find_nothing_outside_the_exempt_files() -> None:
    here = Path(sys.executable).parent
    for tool in ("ruff", "mypy"):
        if not (here / tool).exists() and shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (pip install -e '.[test]')")
    spec = importlib.util.spec_from_file_location("static_checks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.check() == []
