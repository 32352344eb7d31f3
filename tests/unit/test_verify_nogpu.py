"""Without a GPU: real runs of checks.py and of `kiln verify --here` on this machine.

They must produce the "no CUDA device" report (JSON with --json) and exit 8, never a traceback.
Skipped where torch (CPU or CUDA) is not installed, or where a GPU is visible.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode

torch = pytest.importorskip("torch")
if torch.cuda.is_available():  # pragma: no cover - GPU hosts test the real thing instead
    pytest.skip("a CUDA device is visible: the no-GPU path cannot be tested here", allow_module_level=True)

CHECKS_PY = Path(__file__).resolve().parents[2] / "src" / "torchkiln" / "verify" / "checks.py"


def _run(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(CHECKS_PY), *args], capture_output=True, text=True, timeout=300,
                          check=False)


def test_checks_py_json_reports_no_cuda_device_and_exits_8() -> None:
    p = _run("--json")
    assert p.returncode == ExitCode.NO_GPU, p.stderr
    assert "Traceback" not in p.stderr
    report = json.loads(p.stdout)
    assert report["status"] == "no-gpu" and report["exit_code"] == 8
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["torch_import"]["status"] == "pass"
    assert by_name["cuda_available"]["status"] == "fail"
    assert by_name["cuda_available"]["reason"].startswith("no CUDA device: ")
    assert all(by_name[n]["status"] == "skip" for n in ("devices", "matmul", "nccl", "extensions"))
    assert report["environment"]["torch"] == torch.__version__


def test_checks_py_without_torch_reports_the_import_failure(tmp_path: Path) -> None:
    # the same interpreter without site-packages: no torch, exactly like an image without it
    wrapper = tmp_path / "python-nosite"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    p = _run("--json", python=str(wrapper))
    assert p.returncode == ExitCode.CHECK_FAILED, p.stderr
    report = json.loads(p.stdout)
    assert report["status"] == "fail"
    first = report["checks"][0]
    assert first["name"] == "torch_import" and first["status"] == "fail"
    assert "No module named 'torch'" in first["reason"]
    assert all(c["status"] == "skip" for c in report["checks"][1:])


def test_checks_py_usage_error_exits_2() -> None:
    p = _run("--only", "nonsense")
    assert p.returncode == 2 and "nonsense" in p.stderr


def test_kiln_verify_here_json_with_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    spec = Path(__file__).resolve().parents[2] / "examples" / "flash-attn.toml"
    rc = main(["verify", "--here", "--json", "--spec", str(spec), "--only", "matmul"])
    out = capsys.readouterr().out
    assert rc == ExitCode.NO_GPU
    report = json.loads(out)
    assert report["status"] == "no-gpu" and report["target"] == f"--here: {sys.executable}"
    # the spec reached the checks: CUDA variant, driver floor and extensions of the plan
    assert report["spec"]["cuda"] == "12.4" and report["spec"]["min_driver"] == "525.60.13"
    assert report["spec"]["extensions"] == [{"name": "flash-attn", "import": "flash_attn"}]


def test_kiln_verify_here_table(capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    rc = main(["verify", "--here"])
    out = capsys.readouterr().out
    assert rc == 8
    assert "no CUDA device where the checks ran" in out and "Traceback" not in out
    assert "cuda_available" in out and "CPU-only build" in out.replace("\n", " ")


def test_kiln_verify_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    assert main(["verify", "--here", "some/image"]) == ExitCode.USAGE
    assert main(["verify", "--here", "--only", "bogus"]) == ExitCode.USAGE
    assert main(["verify"]) == ExitCode.INPUT  # nothing to verify
    assert "nothing to verify" in capsys.readouterr().err.replace("\n", " ")


def test_kiln_verify_here_with_a_python_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    rc = main(["verify", "--here", "--python", os.path.join(os.sep, "nonexistent", "python3")])
    assert rc == ExitCode.ENGINE_MISSING
    assert "--python" in capsys.readouterr().err
