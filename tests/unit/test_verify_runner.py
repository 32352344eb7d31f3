"""Host side of kiln verify: the command line given to the checks, staging, the spec from labels,
the classification of engine failures (with the engines' real messages), and report parsing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from rich.console import Console

from torchkiln.errors import BuildError, ExitCode, InputError, NoGPUError
from torchkiln.runner import Completed
from torchkiln.verify import checks
from torchkiln.verify.report import parse_report, render_report, report_from_dict
from torchkiln.verify.runner import (
    MOUNT,
    VerifyOptions,
    checks_args,
    classify_failure,
    interpret,
    spec_from_labels,
    stage_bundle,
)


def _report(status: str = "pass", checks_: list[dict[str, object]] | None = None) -> dict[str, object]:
    rows = checks_ or [{"name": "devices", "status": "pass", "reason": "0: NVIDIA H100 80GB HBM3", "seconds": 0.0,
                        "details": {}}]
    code = {"pass": 0, "fail": 1, "no-gpu": 8}[status]
    return {"schema": checks.SCHEMA, "status": status, "exit_code": code, "summary": {},
            "environment": {"torch": "2.11.0+cu130", "torch_cuda": "13.0", "python": "3.12.3"}, "checks": rows}


def _completed(rc: int, stdout: str = "", stderr: str = "") -> Completed:
    return Completed(("docker", "run", "--rm", "img", "/kiln-verify/checks.py"), rc, stdout, stderr, 0.5)


def test_checks_args() -> None:
    assert checks_args(MOUNT, VerifyOptions()) == [f"{MOUNT}/checks.py", "--json"]
    got = checks_args("/b", VerifyOptions(spec={"cuda": "13.0"}, only=("matmul", "sdpa"), skip=("nccl",),
                                          matmul_size=4096))
    assert got == ["/b/checks.py", "--json", "--spec-json", "/b/spec.json", "--only", "matmul,sdpa",
                   "--skip", "nccl", "--matmul-size", "4096"]
    got = checks_args("/b", VerifyOptions(spec_in_image="/opt/kiln/verify/spec.json"))
    assert got[-2:] == ["--spec-json", "/opt/kiln/verify/spec.json"]
    # every argument it builds is one checks.py accepts
    args, opts = checks.parse_args(checks_args("/b", VerifyOptions(only=("matmul",), matmul_size=2048))[1:])
    assert opts.only == {"matmul"} and opts.matmul_size == 2048 and args.json


def test_stage_bundle(tmp_path: Path) -> None:
    dest = tmp_path / "bundle"
    stage_bundle(dest, {"cuda": "13.0", "extensions": [{"name": "flash-attn", "import": "flash_attn"}]})
    assert sorted(p.name for p in dest.iterdir()) == ["arch.py", "checks.py", "fatbin.py", "firstrun.py", "spec.json"]
    assert json.loads((dest / "spec.json").read_text())["cuda"] == "13.0"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in dest.iterdir())
    # the staged checks find the staged reader next to them
    reader = checks.find_fatbin_reader(dest, [])
    assert reader is not None and str(dest / "fatbin.py") in reader.describe
    stage_bundle(tmp_path / "nospec", None)
    assert not (tmp_path / "nospec" / "spec.json").exists()


def test_spec_from_labels() -> None:
    assert spec_from_labels({}) is None
    assert spec_from_labels({"io.torchkiln.cuda": "13.0", "io.torchkiln.min-driver": "580.65.06",
                             "io.torchkiln.torch": "2.11.0"}) == {"cuda": "13.0", "min_driver": "580.65.06"}
    assert spec_from_labels({"io.torchkiln.cuda": "", "io.torchkiln.min-driver": ""}) is None  # CPU image


# the engines' own words, as this machine's docker 20.10 and podman 4 print them without GPUs
DOCKER_NO_GPU = 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'
PODMAN_NO_CDI = "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"
DOCKER_NO_PYTHON = ('docker: Error response from daemon: failed to create shim task: OCI runtime create failed: '
                    'runc create failed: unable to start container process: exec: "python3": executable file '
                    'not found in $PATH: unknown.')


@pytest.mark.parametrize(
    ("rc", "stderr", "error", "words"),
    [
        (125, DOCKER_NO_GPU, NoGPUError, "NVIDIA Container Toolkit"),
        (125, PODMAN_NO_CDI, NoGPUError, "nvidia-ctk cdi generate"),
        (127, DOCKER_NO_PYTHON, InputError, "--python"),
        (125, "Unable to find image 'acme/x:1' locally\npull access denied for acme/x", InputError, "kiln build"),
        (125, "docker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: "
              "initialization error: nvml error: driver not loaded", NoGPUError, "nvidia-smi"),
        (137, "Killed", BuildError, "--debug"),
    ],
)
def test_classify_failure(rc: int, stderr: str, error: type, words: str) -> None:
    e = classify_failure(_completed(rc, stderr=stderr), "docker", "acme/x:1", "python3")
    assert type(e) is error
    assert words in (e.hint or "")
    assert e.details and stderr.splitlines()[-1] in e.details


def test_no_gpu_error_has_the_no_gpu_exit_code() -> None:
    e = classify_failure(_completed(125, stderr=DOCKER_NO_GPU), "docker", "img", "python3")
    assert e.exit_code == ExitCode.NO_GPU


def test_interpret_reads_reports_for_every_report_exit_code() -> None:
    for status, rc in (("pass", 0), ("fail", 1), ("no-gpu", 8)):
        r = interpret(_completed(rc, stdout=json.dumps(_report(status))), "docker:img", engine="docker",
                      image="img", python="python3")
        assert r.status == status and int(r.exit_code) == rc
        assert r.to_dict()["target"] == "docker:img"


def test_interpret_rejects_inconsistent_or_missing_reports() -> None:
    with pytest.raises(InputError, match="exited 1 but reported 'pass'"):
        interpret(_completed(1, stdout=json.dumps(_report("pass"))), "t", engine="docker", image="i",
                  python="python3")
    with pytest.raises(InputError, match="no JSON report"):
        interpret(_completed(0, stdout="hello\n"), "t", engine="docker", image="i", python="python3")
    with pytest.raises(NoGPUError):
        interpret(_completed(125, stderr=DOCKER_NO_GPU), "t", engine="docker", image="i", python="python3")
    with pytest.raises(InputError, match="rejected its arguments"):
        interpret(_completed(2, stderr="usage: checks.py ...\nchecks.py: error: bad"), "t", engine="docker",
                  image="i", python="python3")


def test_parse_report_skips_noise_before_the_json() -> None:
    text = "some warning\n" + json.dumps(_report("pass"), indent=2)
    assert parse_report(text, "t").status == "pass"
    with pytest.raises(InputError, match="not JSON"):
        parse_report("{not json", "t")


@pytest.mark.parametrize(
    "mutation",
    [{"schema": "other/1"}, {"status": "maybe"}, {"checks": "none"}, {"checks": [{"name": "x", "status": "meh"}]}],
)
def test_report_from_dict_validates(mutation: dict[str, object]) -> None:
    data = _report("pass") | mutation
    with pytest.raises(InputError, match="not a verify report"):
        report_from_dict(data, "t")


def test_render_report_shows_failures_with_the_binary_paths() -> None:
    rows = [
        {"name": "arch_extensions", "status": "fail", "seconds": 0.8,
         "reason": "libkiln_sm80_only.so is not runnable on device 0 (NVIDIA H100 80GB HBM3, 9.0): ...",
         "details": {"not_runnable": [{"binary": "libkiln_sm80_only.so", "path": "/x/libkiln_sm80_only.so",
                                       "device": 0, "capability": "9.0", "has": ["sm_80"]}]}},
        {"name": "matmul", "status": "pass", "seconds": 0.5, "reason": "fp32 4.1e-07", "details": {}},
        {"name": "nccl", "status": "skip", "seconds": 0.0, "reason": "1 GPU visible", "details": {}},
    ]
    console = Console(record=True, width=200)
    render_report(report_from_dict(_report("fail", rows), "docker:acme/x:1"), console)
    out = console.export_text()
    assert "kiln verify docker:acme/x:1 · torch 2.11.0+cu130 (CUDA 13.0)" in out
    assert "/x/libkiln_sm80_only.so: has sm_80" in out
    assert "FAILED: arch_extensions (1 passed, 1 failed, 1 skipped)" in out


def test_render_no_gpu_report_collapses_the_skipped_checks() -> None:
    rows = [{"name": "cuda_available", "status": "fail", "seconds": 0.0, "reason": "no CUDA device: CPU build",
             "details": {}}] + [{"name": n, "status": "skip", "seconds": 0.0, "reason": "no CUDA device",
                                 "details": {}} for n in ("matmul", "sdpa")]
    console = Console(record=True, width=200)
    render_report(report_from_dict(_report("no-gpu", rows), "t"), console)
    out = console.export_text()
    assert "matmul" not in out and "the 2 GPU checks were skipped" in out
