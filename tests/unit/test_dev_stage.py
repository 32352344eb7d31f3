"""The dev stage is where people build extensions: torch's own nvcc for CUDA plans, and sudo."""

import re
from pathlib import Path

import pytest

from torchkiln.knowledge import load_knowledge
from torchkiln.render import render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec

ROOT = Path(__file__).parents[2]


def _plan(name: str):  # type: ignore[no-untyped-def]
    return resolve(load_spec(ROOT / "examples" / name), load_knowledge())


def _stage(text: str, name: str) -> str:
    m = re.search(rf"^FROM \S+ AS {name}\n.*?(?=^# |\Z)", text, re.M | re.S)
    assert m, name
    return m.group(0)


@pytest.mark.parametrize("name", ["cu130-hopper.toml", "custom-ext.toml", "flash-attn.toml"])
def test_cuda_dev_stage_starts_from_the_toolchain(name: str) -> None:
    plan = _plan(name)
    assert plan.dev_toolchain is not None and plan.dev_toolchain.cuda == plan.cuda
    text = render_dockerfile(plan)
    assert _stage(text, "dev").startswith("FROM toolchain AS dev")
    toolchain = _stage(text, "toolchain")
    assert f"kiln_check_nvcc {plan.cuda}" in toolchain or plan.dev_toolchain.kind == "image"
    assert 'PYTORCH_NVCC="ccache /usr/local/cuda/bin/nvcc"' in toolchain
    # the runtime never gets it
    assert "toolchain" not in _stage(text, "runtime")


def test_cuda_dev_without_extensions_gets_nvcc_from_the_wheels() -> None:
    plan = _plan("cu130-hopper.toml")
    assert plan.toolchain is None and not plan.extensions  # nothing else compiles
    assert plan.dev_toolchain is not None and plan.dev_toolchain.kind == "wheels"
    assert any(d.topic == "dev toolchain" for d in plan.decisions)


def test_cuda12_on_a_slim_base_warns_that_dev_has_no_nvcc() -> None:
    plan = _plan("cu124-a100.toml")
    assert plan.dev_toolchain is None
    assert any("dev stage has no nvcc" in w for w in plan.warnings)
    assert _stage(render_dockerfile(plan), "dev").startswith("FROM torch AS dev")


def test_cpu_dev_stage_has_compilers_and_sudo() -> None:
    plan = _plan("cpu.toml")
    assert plan.dev_toolchain is None
    dev = _stage(render_dockerfile(plan), "dev")
    assert dev.startswith("FROM torch AS dev") and "build-essential" in dev and " sudo" in dev
    assert "echo 'kiln ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/kiln" in dev
    assert 'CCACHE_DIR="/home/kiln/.cache/ccache"' in dev  # the user's own, not root's
    assert "USER 1000:1000" in dev
    runtime = _stage(render_dockerfile(plan), "runtime")
    assert "sudo" not in runtime and "build-essential" not in runtime


def test_root_dev_needs_no_sudoers() -> None:
    plan = resolve(parse_spec({"image": {"name": "a"}, "torch": {"cuda": "cpu"}, "app": {"user": "root"}}),
                   load_knowledge())
    dev = _stage(render_dockerfile(plan), "dev")
    assert "sudoers" not in dev and "USER root" in dev
