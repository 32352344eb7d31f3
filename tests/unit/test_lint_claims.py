"""The facts rules rest on, checked against the real tools where they run offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from torchkiln.lint import lint_text


def _uv() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            pytest.skip("uv is not installed")
        return found


def _wheel(folder: Path, version: str) -> None:
    dist = f"kilnprobe-{version}.dist-info"
    with zipfile.ZipFile(folder / f"kilnprobe-{version}-py3-none-any.whl", "w") as z:
        z.writestr("kilnprobe/__init__.py", "")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: kilnprobe\nVersion: {version}\n")
        z.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: kiln-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}/RECORD", "")


def test_uv_ignores_pip_constraint_so_kl013_asks_for_uv_constraint(tmp_path: Path) -> None:
    """KL013 accepts PIP_CONSTRAINT for pip only: uv reads UV_CONSTRAINT (measured, offline)."""
    uv = _uv()
    links = tmp_path / "links"
    links.mkdir()
    for v in ("1.0", "2.0"):
        _wheel(links, v)
    cons = tmp_path / "constraint.txt"
    cons.write_text("kilnprobe==1.0\n")
    # --no-config: a uv.toml in a folder above (uv looks for one from the working folder up) must not count
    subprocess.run([uv, "venv", "-q", "--no-config", str(tmp_path / "venv")], check=True, capture_output=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}

    def resolved(extra: dict[str, str]) -> str:
        out = subprocess.run(
            [uv, "pip", "install", "--dry-run", "--no-config", "--python", str(tmp_path / "venv" / "bin" / "python"),
             "--no-index", "--find-links", str(links), "kilnprobe"],
            capture_output=True, text=True, env={**base_env, **extra}, check=True,
        )  # fmt: skip
        return "2.0" if "kilnprobe==2.0" in out.stdout + out.stderr else "1.0"

    assert resolved({"PIP_CONSTRAINT": str(cons)}) == "2.0"  # ignored
    assert resolved({"UV_CONSTRAINT": str(cons)}) == "1.0"

    ngc = "FROM nvcr.io/nvidia/pytorch:25.03-py3\nENV {var}=/etc/pip/constraint.txt\n{run}\nUSER 1000\n"
    uv_run = "RUN --mount=type=cache,target=/root/.cache/uv uv pip install --system torch==2.6.0"
    assert [f.rule for f in lint_text(ngc.format(var="PIP_CONSTRAINT", run=uv_run))] == ["KL013"]
    assert lint_text(ngc.format(var="UV_CONSTRAINT", run=uv_run)) == []
