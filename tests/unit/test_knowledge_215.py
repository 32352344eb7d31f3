"""torch 2.15 (measured on PyPI 2026-11-26) and the companion rows: what resolve plans with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, ResolveError
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.spec import parse_spec

RESULTS = Path(__file__).parents[2] / "scripts" / "results" / "companions.txt"


def plan(**tables):
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())


def fails(**tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


def test_215_is_the_newest_and_pypi_serves_its_cu132_build() -> None:
    p = plan(torch={"version": "2.15.0"}, gpu={"targets": ["H100", "RTX 5090"]})
    assert p.torch.requirement == "torch==2.15.0" and p.torch.on_default_index and p.torch.cuda == "13.2"
    assert p.torch.wheel_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0" and all(t.covered for t in p.targets)
    assert "MEASURED" in p.torch.wheel_arch_source
    assert plan().torch.version == "2.15.0"  # "newest known" is what a plain `pip install torch` gets


def test_215_variants_on_both_platforms() -> None:
    arm = plan(torch={"version": "2.15.0"}, gpu={"targets": ["GH200"]})
    assert arm.platform == "linux/arm64" and arm.torch.requirement == "torch==2.15.0" and arm.torch.cuda == "13.2"
    assert arm.torch.wheel_arch_list == "8.0;9.0;10.0;11.0;12.0"
    cu130 = plan(torch={"version": "2.15.0", "cuda": "13.0"}, gpu={"targets": ["A100"]})
    assert cu130.torch.requirement == "torch==2.15.0+cu130" and not cu130.torch.on_default_index
    cpu = plan(torch={"version": "2.15.0", "cuda": "cpu"})
    assert cpu.torch.requirement == "torch==2.15.0+cpu"


def test_215_drops_python_310_and_cuda_126() -> None:
    e = fails(python={"version": "3.10"}, torch={"version": "2.15.0"})
    assert "Python 3.10" in e.message and "2.14.1" in (e.hint or "")
    e = fails(torch={"version": "2.15.0", "cuda": "12.6"})
    assert "not built for CUDA 12.6" in e.message
    # a Pascal GPU needs the cu126 build, which 2.15 no longer has: the newest that covers it is offered
    e = fails(torch={"version": "2.15.0"}, gpu={"targets": ["P100"]})
    assert 'torch 2.14.1 with cuda = "12.6"' in (e.hint or "")


def test_companions_move_an_unpinned_torch_to_a_release_that_has_them() -> None:
    p = plan(torch={"packages": ["torchvision"]})
    assert p.torch.version == "2.14.1" and p.torch.companions == ("torchvision==0.29.1",)
    p = plan(torch={"version": ">=2.10", "packages": ["torchaudio"]})
    assert p.torch.version == "2.11.0" and p.torch.companions == ("torchaudio==2.11.0",)
    assert {d.topic: d.choice for d in p.decisions}["torchaudio"] == "2.11.0"


def test_a_pinned_torch_without_its_companion_is_refused_with_working_fixes() -> None:
    e = fails(torch={"version": "2.15.0", "packages": ["torchvision"]})
    assert "torchvision has no release for torch 2.15.0" in e.message and "0.29.1" in e.message
    assert 'torch 2.14.1 with cuda = "13.0"' in (e.hint or "") and "drop torchvision" in (e.hint or "")
    for fix in e.fixes:  # every fix offered resolves
        spec = {"image": {"name": "acme/t"}, "torch": {"version": "2.15.0", "packages": ["torchvision"]}}
        spec["torch"] = {**spec["torch"], **fix["torch"]}  # type: ignore[dict-item]
        resolve(parse_spec(spec), load_knowledge())
    e = fails(torch={"version": "2.12.1", "packages": ["torchaudio"]})
    assert "torchaudio" in e.message and "2.11.0" in e.message


def test_companions_of_a_labelled_torch_are_that_variants_build() -> None:
    p = plan(torch={"version": "2.13.0", "cuda": "cpu", "packages": ["torchvision"]})
    assert p.torch.requirement == "torch==2.13.0+cpu" and p.torch.companions == ("torchvision==0.28.0+cpu",)
    p = plan(torch={"version": "2.0.0", "cuda": "11.8", "packages": ["torchvision", "torchaudio"]})
    # torchaudio's 2.0 releases are numbered one patch ahead of torch's
    assert p.torch.companions == ("torchvision==0.15.1+cu118", "torchaudio==2.0.1+cu118")


def test_no_plan_names_a_companion_that_does_not_exist() -> None:
    """Every torch release x companion: the pinned companion is one PyPI has (scripts/results/companions.txt
    lists each wheel read), built for that torch, or the plan is refused."""
    on_pypi = {(m.group(1), m.group(2)) for m in re.finditer(r"^(torchvision|torchaudio) (\S+) ", RESULTS.read_text(),
                                                             re.M)}
    kb = load_knowledge()
    planned = refused = 0
    for version in kb.all_patches():
        for pkg in ("torchvision", "torchaudio"):
            try:
                p = plan(torch={"version": version, "packages": [pkg]})
            except ResolveError as e:
                assert f"{pkg} has no release for torch {version}" in e.message
                refused += 1
                continue
            name, pinned = p.torch.companions[0].split("==")
            assert (name, pinned.split("+")[0]) in on_pypi, (version, p.torch.companions)
            planned += 1
    assert planned == 49 and refused == 7


def test_an_unpinned_torch_with_a_variant_the_newest_dropped_reports_the_real_obstacle() -> None:
    """cuda = "12.6" without a version: 2.15 has no cu126, so the error is about the newest release that has
    it (2.14.1), not about 2.15's missing variant."""
    e = fails(torch={"cuda": "12.6"}, gpu={"targets": ["L4"], "min_driver": "470.82"})
    assert "not built for CUDA 12.6" not in e.message and "L4 needs driver 520.61.05" in e.message
