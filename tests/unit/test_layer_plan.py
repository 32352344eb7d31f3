"""render/layer_plan.py: a CUDA torch set split into one layer per CUDA library, below torch's."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.render import layer_plan
from torchkiln.render.dockerfile import render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec


def _plan(path: Path) -> BuildPlan:
    return resolve(load_spec(path), load_knowledge())


def _family(line: str) -> list[str]:
    return [name for name, pattern in layer_plan.FAMILIES if re.search(pattern, line, re.IGNORECASE)]


def test_each_cuda_library_of_cuda_12_and_13_names_matches_exactly_one_family() -> None:
    cases = {
        "nvidia-cublas==13.1.1.3": ["cublas"],
        "nvidia-cublas-cu12==12.8.4.1": ["cublas"],
        "nvidia_cublas_cu12==12.8.4.1 --hash=sha256:ab": ["cublas"],
        "nvidia-cusparse==12.6.3.3": ["cusparse"],
        "nvidia-cusparselt-cu13==0.8.1": ["cusparselt"],
        "nvidia-cuda-runtime-cu12==12.8.90": ["cuda-toolkit-libraries"],
        "nvidia-nvjitlink==13.4.92": ["nvjitlink"],
        "nvidia_cuda_nvrtc_cu12==12.8.93": ["cuda-toolkit-libraries"],
        "nvidia-cudnn-cu13==9.24.0.43": ["cudnn"],
        "nvidia-nccl-cu13==2.30.7": ["nccl"],
        "triton==3.8.0": ["triton"],
        # not a library of its own: stays in torch's layer
        "torch==2.14.1": [],
        "cuda-toolkit==13.0.3": [],
        "nvidia-cuda-runtime-cu12>=12": [],  # only exact pins (a resolved set or a lock) are split
    }
    for line, want in cases.items():
        assert _family(line) == want, line


def test_a_cuda_torch_gets_a_venv_step_and_one_step_per_family_before_torch_s(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.14.1"\ncuda = "13.0"\n[gpu]\ntargets = ["H100"]\n')
    plan = _plan(spec)
    assert layer_plan.split_torch(plan)
    text = render_dockerfile(plan)
    torch_stage = text.split("FROM base AS torch\n", 1)[1].split("\n\n", 1)[0]
    runs = torch_stage.split("\nRUN ")[1:]
    assert len(runs) == 1 + len(layer_plan.FAMILIES) + 1
    assert "uv venv" in runs[0] and "pip compile" in runs[0] and layer_plan.SET_FILE in runs[0]
    for run, (_name, pattern) in zip(runs[1:-1], layer_plan.FAMILIES, strict=True):
        assert f"grep -iE '{pattern}' {layer_plan.SET_FILE}" in run
        assert "--no-deps" in run and "find /opt/venv" in run  # installs one family, stamps its files
    assert "uv venv" not in runs[-1] and "-r /kiln/requirements-torch.txt" in runs[-1]
    # the resolved list lives in a cache mount, in no layer
    assert f"target={layer_plan.SET_DIR}" in runs[1] and "type=cache" in runs[1]


def test_with_a_lock_the_families_come_from_the_lock_s_hashed_pins(tmp_path: Path) -> None:
    from torchkiln.plan import LockPins

    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.14.1"\ncuda = "13.0"\n[gpu]\ntargets = ["H100"]\n')
    pins = LockPins(torch=("nvidia-cublas==13.1.1.3 --hash=sha256:" + "a" * 64, "torch==2.14.1 --hash=sha256:" + "b" * 64),
                    packages=(), base_id="", lock="kiln.lock")
    text = render_dockerfile(dataclasses.replace(_plan(spec), locked=pins))
    stage = text.split("FROM base AS torch\n", 1)[1].split("\n\n", 1)[0]
    assert "pip compile" not in stage and "torch-set" not in stage
    assert "grep -iE '^nvidia[-_.]cublas([-_.]cu[0-9]+)?==' /kiln/requirements-torch.txt" in stage
    assert stage.count("--no-deps --require-hashes -r /tmp/kiln-layer.txt") == len(layer_plan.FAMILIES)


def test_a_cpu_torch_is_one_layer(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n')
    plan = _plan(spec)
    assert not layer_plan.split_torch(plan)
    stage = render_dockerfile(plan).split("FROM base AS torch\n", 1)[1].split("\n\n", 1)[0]
    assert stage.count("\nRUN ") == 1 and "uv venv" in stage
