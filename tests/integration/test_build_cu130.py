"""The CUDA 13.0 example (torch 2.14.1 + torchvision from the configured index folder), built for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine
from torchkiln.render import layer_plan
from torchkiln.render.reproducible import DEFAULT_EPOCH

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
    # the layer plan (render/layer_plan.py): the venv, one step per CUDA library family, then torch's step
    torch_steps = [s for s in summary.steps if s.stage == "torch"]
    assert len(torch_steps) == 1 + len(layer_plan.FAMILIES) + 1
    assert details.layers >= len(torch_steps) + 3
    # each library is installed once: the image is the base plus the venv, not the venv and a second copy
    r = docker_engine.run(tag, ["du", "-sb", "/opt/venv"], check=False)
    venv = int(r.stdout.split()[0])
    base = docker_engine.inspect_image(offline_base).size
    assert summary.size_bytes < (base + venv) * 1.05, (summary.size_bytes, base, venv)
    # the libraries' files carry SOURCE_DATE_EPOCH (render/reproducible.py)
    nvidia = "/opt/venv/lib/python3.11/site-packages/nvidia"
    r = docker_engine.run(tag, ["sh", "-c", f"find {nvidia} -type f | wc -l; find {nvidia} -newermt @{DEFAULT_EPOCH} | wc -l"],
                          check=False)
    assert r.returncode == 0, r.output
    files, newer = (int(x) for x in r.stdout.split()[-2:])
    assert files > 100 and newer == 0
    # uv's own cache stays out of every layer: the interpreter entry `uv venv` writes is keyed by the
    # interpreter's ctime (when a daemon unpacked the base) and kept the venv layer apart across daemons
    r = docker_engine.run(tag, ["sh", "-c", "find /root/.cache/uv -mindepth 1 | head"], check=False)
    assert r.returncode == 0 and r.stdout.strip() == "", r.output
    docker_engine.remove_image(tag)
