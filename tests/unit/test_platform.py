"""The platform dimension: Grace systems resolve to linux/arm64 plans, Jetson is refused, mixed targets
are an error, and the corrected knowledge rows (each with the upstream fact it encodes)."""

from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, ResolveError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.render import render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec


def plan(image=None, **tables):
    return resolve(parse_spec({"image": {"name": "acme/t", **(image or {})}, **tables}), load_knowledge())


def fails(image=None, **tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(image, **tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


# -- platform rules --------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ["GH200", "GB200", "GB300", "GB10", "DGX Spark"])
def test_grace_systems_resolve_to_arm64(gpu: str) -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": [gpu]})
    assert p.platform == "linux/arm64"
    assert p.torch.requirement == "torch==2.14.1" and p.torch.on_default_index  # PyPI's aarch64 wheel is cu130
    assert p.torch.variant == "cu130"
    assert p.torch.wheel_arch_list == "8.0;9.0;10.0;11.0;12.0"  # the aarch64 row, not x86_64's
    assert all(t.covered for t in p.targets)
    d = {x.topic: x for x in p.decisions}
    assert d["platform"].choice == "linux/arm64" and "aarch64" in d["platform"].why
    assert "linux/arm64" in d["base image"].why
    assert p.to_dict()["platform"] == "linux/arm64"
    assert "x86_64" not in str(p.to_dict()) and "amd64" not in str(p.to_dict())


def test_arm64_plan_says_its_platform_in_the_image_labels() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["GH200"]})
    text = render_dockerfile(p)
    assert '"io.torchkiln.platform"' not in text and 'io.torchkiln.platform="linux/arm64"' in text
    amd = render_dockerfile(plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"]}))
    assert "io.torchkiln.platform" not in amd  # amd64 images are rendered exactly as before


def test_default_platform_is_amd64() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"]})
    assert p.platform == "linux/amd64" and p.torch.wheel_arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert plan(torch={"version": "2.14.1", "cuda": "cpu"}).platform == "linux/amd64"


def test_mixed_platform_targets_are_an_error_with_the_fix() -> None:
    e = fails(torch={"version": "2.14.1"}, gpu={"targets": ["GH200", "H100 PCIe"]})
    assert "different CPU architectures" in e.message and "GH200" in e.message and "H100 PCIe" in e.message
    assert "one image per platform" in e.hint and 'platform = "linux/arm64"' in e.hint


def test_named_platform_allows_discrete_gpus_in_arm_servers() -> None:
    p = plan({"platform": "linux/arm64"}, torch={"version": "2.14.1"}, gpu={"targets": ["GH200", "H100 PCIe"]})
    assert p.platform == "linux/arm64" and all(t.covered for t in p.targets)


def test_named_amd64_platform_refuses_grace() -> None:
    e = fails({"platform": "linux/amd64"}, torch={"version": "2.14.1"}, gpu={"targets": ["GB200"]})
    assert "GB200" in e.message and "aarch64" in e.message
    assert "linux/arm64" in e.hint


def test_jetson_is_refused_with_the_working_alternative() -> None:
    for name in ("Jetson AGX Orin", "Jetson Orin Nano", "Xavier", "8.7"):
        e = fails(gpu={"targets": [name]})
        assert "Jetson (Tegra)" in e.message
        assert "L4T/JetPack" in e.hint and "l4t-jetpack" in e.hint


def test_jetson_thor_is_sbsa_and_covered_by_cu130_aarch64() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["Jetson Thor"]})
    assert p.platform == "linux/arm64" and p.targets[0].how == "SASS sm_110"


def test_turing_is_not_in_the_aarch64_wheels() -> None:
    e = fails({"platform": "linux/arm64"}, torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["T4"]})
    assert "aarch64 has no kernel image for T4" in e.message


def test_release_without_cuda_aarch64_wheels() -> None:
    e = fails(torch={"version": "2.5.1"}, gpu={"targets": ["GH200"]})
    assert "only CPU builds" in e.message and "aarch64" in e.message
    assert "2.1" in e.hint  # a newer release with aarch64 CUDA wheels is suggested


def test_2_6_aarch64_has_cu126_on_pytorchs_index() -> None:
    """release/2.6 built its CUDA aarch64 wheels with 12.6 (torch-2.6.0+cu126-cp312-cp312-linux_aarch64.whl)."""
    p = plan(torch={"version": "2.6.0"}, gpu={"targets": ["GH200"]})
    assert p.torch.requirement == "torch==2.6.0+cu126" and not p.torch.on_default_index
    e = fails(torch={"version": "2.6.0", "cuda": "12.4"}, gpu={"targets": ["GH200"]})
    assert "not built for CUDA 12.4 on aarch64 (its aarch64 variants: cu126)" in e.message
    assert {"torch": {"version": "2.6.0", "cuda": "12.6"}} == e.fixes[0]
    # sm_90 only: a Blackwell superchip is not covered by 2.6's aarch64 wheels
    assert "no kernel image for GB200" in fails(torch={"version": "2.6.0"}, gpu={"targets": ["GB200"]}).message


def test_cpu_on_arm64() -> None:
    new = plan({"platform": "linux/arm64"}, torch={"version": "2.13.0", "cuda": "cpu"})
    assert new.torch.requirement == "torch==2.13.0+cpu" and not new.torch.on_default_index
    old = plan({"platform": "linux/arm64"}, torch={"version": "2.4.1", "cuda": "cpu"})
    assert old.torch.requirement == "torch==2.4.1" and old.torch.on_default_index  # PyPI's aarch64 build is CPU


def test_aarch64_python_set_is_its_own() -> None:
    e = fails({"platform": "linux/arm64"}, torch={"version": "2.5.1", "cuda": "cpu"}, python={"version": "3.13"})
    assert "no aarch64 wheels for Python 3.13" in e.message
    assert plan(torch={"version": "2.5.1", "cuda": "cpu"}, python={"version": "3.13"}).python == "3.13"


def test_platform_is_validated_strictly(tmp_path: Path) -> None:
    f = tmp_path / "kiln.toml"
    f.write_text('[image]\nname = "a/b"\nplatform = "arm64"\n')
    with pytest.raises(SpecError) as e:
        load_spec(f)
    assert "[image] key 'platform'" in str(e.value) and "linux/arm64" in str(e.value)


# -- corrected knowledge rows ----------------------------------------------------------------------
def test_v100_with_torch_2_11_picks_cu126() -> None:
    # pytorch/pytorch#182250 measured 2.11.0+cu126: sm_50..sm_90
    p = plan(torch={"version": "2.11.0"}, gpu={"targets": ["V100"]})
    assert p.torch.variant == "cu126" and p.targets[0].how == "SASS sm_70"


def test_torch_2_7_default_cu126_and_cu118_rows() -> None:
    p = plan(torch={"version": "2.7.1"}, gpu={"targets": ["V100"]})
    assert p.torch.requirement == "torch==2.7.1" and p.torch.variant == "cu126"  # measured default
    p118 = plan(torch={"version": "2.7.1", "cuda": "11.8"}, gpu={"targets": ["K80"]})
    assert p118.targets[0].how == "SASS sm_37"


def test_no_ptx_claimed_where_release_wheels_strip_it() -> None:
    kb = load_knowledge()
    for series, cuda in [("2.7", "12.8"), ("2.8", "12.9"), ("2.9", "13.0"), ("2.10", "13.0"), ("2.11", "12.9")]:
        row = kb.arch_row(series, cuda)
        assert row is not None and not any(e.kind == "ptx" for e in row.entries), (series, cuda)
    # so an RTX 5090 (12.0) is covered by SASS, a hypothetical 13.0 device by nothing
    p = plan(torch={"version": "2.7.1", "cuda": "12.8"}, gpu={"targets": ["RTX 5090"]})
    assert p.targets[0].how == "SASS sm_120"


def test_cu129_exists_for_2_12_1_to_2_13() -> None:
    for v in ("2.12.1", "2.13.0"):
        p = plan(torch={"version": v, "cuda": "12.9"}, gpu={"targets": ["H100"]})
        assert p.torch.requirement == f"torch=={v}+cu129"
    e = fails(torch={"version": "2.12.0", "cuda": "12.9"}, gpu={"targets": ["H100"]})
    assert "starts with 2.12.1" in e.message


def test_no_cu129_for_2_14() -> None:
    """release/2.14 ships 12.6, 13.0 and 13.2; PyTorch's index has no 2.14.0+cu129 (cu129 stops at 2.13.0)."""
    for v in ("2.14.0", "2.14.1"):
        e = fails(torch={"version": v, "cuda": "12.9"}, gpu={"targets": ["H100"]})
        assert "not built for CUDA 12.9" in e.message and "cu129" not in e.message.split("variants:")[1]
        for plat in ("x86_64", "aarch64"):
            assert all(p.torch.variant != "cu129" for p in [
                plan({"platform": "linux/arm64" if plat == "aarch64" else "linux/amd64"},
                     torch={"version": v}, gpu={"targets": ["H100"], "min_driver": d}) for d in ("535.104", "580.65.06")])


def test_python_3_15_is_experimental_and_off_pypi() -> None:
    p = plan(torch={"version": "2.13.0"}, python={"version": "3.15"}, gpu={"targets": ["H100"]})
    assert p.torch.requirement == "torch==2.13.0+cu130" and not p.torch.on_default_index
    assert any("experimental" in w and "PyTorch's own index" in w for w in p.warnings)
    assert plan(torch={"version": "2.13.0"}, gpu={"targets": ["H100"]}).torch.requirement == "torch==2.13.0"


def test_measured_rows_say_measured() -> None:
    kb = load_knowledge()
    for series, cuda, platform in [("2.0", "11.7", "x86_64"), ("2.7", "12.6", "x86_64"),
                                   ("2.14", "13.0", "x86_64"), ("2.13", "13.0", "aarch64")]:
        row = kb.arch_row(series, cuda, platform)
        assert row is not None and "MEASURED" in row.source, (series, cuda, platform)
