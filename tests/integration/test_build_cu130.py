"""The CUDA 13.0 example (torch 2.14.1 + torchvision from the configured index folder), built for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_cu130_example_has_cuda_13(
    docker_engine: Engine, offline_base: str, mirror: Any, example_copy: Any, tmp_path: Path,
    stable_context: Any,
) -> None:
    if not mirror.has("torch", "2.14.1"):
        pytest.skip("the configured mirror has no torch 2.14.1 (cu130) wheel")
    spec = example_copy(tmp_path / "spec", "cu130-hopper.toml")
    tag = "kiln-test/example-cu130:test"
    options = BuildOptions(base=offline_base, tag=tag, context_dir=stable_context("cu130"), flags=mirror.layer)
    summary = build_image(spec, docker_engine, options, env={})
    r = docker_engine.run(
        tag,
        ["python", "-c", "import torch, torchvision; print(torch.__version__, torch.version.cuda)"],
        check=False,
    )
    assert r.returncode == 0, r.output
    version, cuda = r.stdout.split()[-2:]
    assert version.startswith("2.14.1")
    assert cuda == "13.0"
    details = docker_engine.inspect_image(tag)
    assert details.labels["io.torchkiln.cuda"] == "13.0"
    assert any(e.startswith("NVIDIA_REQUIRE_CUDA=") for e in details.env)
    assert summary.size_bytes > 2_000_000_000
    docker_engine.remove_image(tag)
