"""kiln verify through real engines (docker, podman): the staged checks really run in the image.

Marked ``engine`` (``podman`` for podman): skipped where no engine is usable. On a host without an
NVIDIA container runtime the GPU run must end in a clear NoGPUError (exit 8); ``--no-gpus`` runs
the checks in the container anyway, which proves the mount, the interpreter and the report path.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import uuid
from collections.abc import Iterator

import pytest

from torchkiln.cli import main
from torchkiln.engines import Engine
from torchkiln.errors import ExitCode, NoGPUError
from torchkiln.verify.runner import VerifyOptions, verify_image

pytestmark = pytest.mark.engine


def _host_has_gpu_runtime() -> bool:
    return shutil.which("nvidia-smi") is not None or shutil.which("nvidia-container-cli") is not None


@pytest.fixture()
def empty_image(docker_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An image with one file and no interpreter: enough for the engine to try to attach GPUs."""
    tar = tmp_path_factory.mktemp("empty") / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        data = b"kiln verify test image\n"
        info = tarfile.TarInfo("README")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    ref = f"kiln-test/verify-empty:{uuid.uuid4().hex[:8]}"
    docker_engine.import_tar(tar, ref)
    yield ref
    docker_engine.remove_image(ref)


def test_gpu_run_without_an_nvidia_runtime_is_a_no_gpu_error(
    empty_image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if _host_has_gpu_runtime():
        pytest.skip("this host has an NVIDIA runtime: the GPU attach succeeds here")
    rc = main(["verify", "--engine", "docker", empty_image, "--json"])
    err = capsys.readouterr()
    assert rc == ExitCode.NO_GPU
    data = json.loads(err.out)
    assert data["error"] == "NoGPUError" and "NVIDIA Container Toolkit" in data["hint"]
    assert "--gpus all" in data["details"]  # the command that was run is shown


def test_image_without_python_is_an_input_error(empty_image: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--engine", "docker", "--no-gpus", empty_image])
    assert rc == ExitCode.INPUT
    assert "python3 cannot be started" in capsys.readouterr().err.replace("\n", " ")


def test_checks_run_in_an_image_without_torch(docker_engine: Engine, offline_base: str) -> None:
    report = verify_image(offline_base, docker_engine, VerifyOptions(gpus=False))
    assert report.status == "fail" and report.exit_code == ExitCode.CHECK_FAILED
    first = report.checks[0]
    assert first.name == "torch_import" and first.status == "fail" and "No module named 'torch'" in first.reason
    assert report.target == f"docker:{offline_base}"


@pytest.mark.slow
def test_checks_run_in_the_cpu_example_and_report_no_cuda_device(
    cpu_build: object, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = cpu_build.ref  # type: ignore[attr-defined]
    rc = main(["verify", "--engine", "docker", "--no-gpus", ref, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.NO_GPU
    assert report["status"] == "no-gpu" and report["environment"]["torch"].endswith("+cpu")
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["torch_import"]["status"] == "pass"
    assert "CPU-only build" in by_name["cuda_available"]["reason"]
    assert report["environment"]["executable"].startswith("/opt/venv/")  # the image's venv python3


@pytest.mark.podman
def test_podman_gpu_run_without_cdi_is_a_no_gpu_error(podman_engine: Engine, podman_base: str) -> None:
    if _host_has_gpu_runtime():
        pytest.skip("this host has an NVIDIA runtime")
    with pytest.raises(NoGPUError, match="CDI"):
        verify_image(podman_base, podman_engine, VerifyOptions())
