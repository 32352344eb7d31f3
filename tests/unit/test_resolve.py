"""The resolver: each error class, and the happy paths."""

import dataclasses
import time
from pathlib import Path

import pytest

from torchkiln.arch import parse_arch_list
from torchkiln.errors import ExitCode, ResolveError
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.toml"))


def plan(**tables):
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())


def fails(**tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


def test_pinned_cu124_for_a100_and_h100() -> None:
    p = plan(torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["A100", "H100"]})
    assert p.torch.requirement == "torch==2.5.1" and p.torch.on_default_index
    assert p.arch_list == "8.0;9.0+PTX"
    assert [(t.name, t.covered, t.how) for t in p.targets] == [
        ("A100", True, "SASS sm_80"), ("H100", True, "SASS sm_90")]
    assert p.min_driver == "525.60.13" and p.nvidia_require_cuda == "cuda>=12.0"


def test_ptx_false_keeps_sass_only() -> None:
    p = plan(torch={"version": "2.5.1"}, gpu={"targets": ["A100", "H100"], "ptx": False})
    assert p.arch_list == "8.0;9.0"


def test_auto_picks_the_default_variant_when_it_covers() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"]})
    assert p.torch.variant == "cu130" and p.torch.requirement == "torch==2.14.1"


def test_auto_falls_back_to_a_variant_that_covers_volta() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["V100"]})
    assert p.torch.variant == "cu126" and p.torch.requirement == "torch==2.14.1+cu126"
    assert not p.torch.on_default_index


def test_specifier_picks_newest_matching() -> None:
    p = plan(torch={"version": ">=2.6,<2.8"}, gpu={"targets": ["L4"]})
    assert p.torch.version == "2.7.1"


def test_cpu_variant() -> None:
    p = plan(torch={"version": "2.13.0", "cuda": "cpu"})
    assert p.torch.requirement == "torch==2.13.0+cpu" and p.torch.cuda is None
    assert p.arch_list == "" and p.min_driver is None and p.nvidia_require_cuda is None


def test_companions_are_matched() -> None:
    p = plan(torch={"version": "2.5.1", "cuda": "12.1", "packages": ["torchvision", "torchaudio"]},
             gpu={"targets": ["A100"]})
    assert p.torch.companions == ("torchvision==0.20.1+cu121", "torchaudio==2.5.1+cu121")


# --- error classes ---------------------------------------------------------------------------

def test_no_kernel_image_for_new_gpu_on_old_wheel() -> None:
    e = fails(torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["RTX 5090"]})
    assert "no kernel image for RTX 5090" in e.message and "12.0" in e.message and "no PTX" in e.message
    assert e.hint and 'torch 2.15.0 with cuda = "13.2"' in e.hint  # the newest release that covers it
    # a torch 2.5.1 source build cannot help: its CUDA 12.4 compiles nothing for 12.0, so it is not offered
    assert "TORCH_CUDA_ARCH_LIST" not in e.hint and e.fixes


def test_no_kernel_image_for_volta_on_cu130() -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["V100"]})
    assert "V100" in e.message
    assert 'torch 2.14.1 with cuda = "12.6"' in e.hint


def test_driver_too_old_for_variant() -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["H100"], "min_driver": "535.104"})
    assert "CUDA 13.0 needs driver 580.65.06" in e.message and "535.104" in e.message
    assert 'cuda = "12.6"' in e.hint
    assert "from source" not in e.hint  # coverage is not the problem


def test_auto_respects_the_driver_floor() -> None:
    p = plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"], "min_driver": "535.104"})
    assert p.torch.variant == "cu126"  # the only CUDA 12 variant of 2.14: there is no 2.14 cu129 wheel


def test_ptx_coverage_needs_a_driver_that_can_jit() -> None:
    # No shipped wheel covers a known GPU through PTX alone, so use a knowledge base whose
    # 2.5/cu124 row carries only 8.0+PTX: an H100 then runs JIT-compiled PTX, which needs the
    # driver of the CUDA 12.4 toolkit (550.54.14), newer than the 530 floor asked for.
    kb = load_knowledge()
    rows = tuple(
        dataclasses.replace(r, arch_list="8.0+PTX", entries=parse_arch_list("8.0+PTX"))
        if (r.series, r.cuda) == ("2.5", "12.4") else r
        for r in kb.arch_rows
    )
    kb2 = dataclasses.replace(kb, arch_rows=rows)
    spec = parse_spec({"image": {"name": "a"}, "torch": {"version": "2.5.1", "cuda": "12.4"},
                       "gpu": {"targets": ["H100"], "min_driver": "530.30.02"}})
    with pytest.raises(ResolveError, match="JIT-compile: PTX from CUDA 12.4 needs driver 550.54.14"):
        resolve(spec, kb2)
    ok = parse_spec({"image": {"name": "a"}, "torch": {"version": "2.5.1", "cuda": "12.4"},
                     "gpu": {"targets": ["H100"], "min_driver": "550.54.14"}})
    assert resolve(ok, kb2).targets[0].how.startswith("PTX compute_80")


def test_python_without_wheels() -> None:
    e = fails(python={"version": "3.8"}, torch={"version": "2.14.1"})
    assert "no wheels for Python 3.8" in e.message
    assert e.hint.startswith("Would work: torch 2.4.1")


def test_extension_excludes_a_target() -> None:
    e = fails(torch={"version": "2.5.1"}, gpu={"targets": ["T4"]},
              extensions=[{"name": "flash-attn", "version": "2.7.4.post1"}])
    assert "flash-attn supports compute capability 8.0" in e.message and "T4 is 7.5" in e.message
    # dropping T4 would leave no target (and torch's own arch list, older than 8.0): not offered
    assert "drop the flash-attn extension" in e.hint and "drop T4" not in e.hint and e.fixes


def test_extension_torch_range() -> None:
    e = fails(torch={"version": "2.1.2"}, gpu={"targets": ["A100"]}, extensions=[{"name": "flash-attn"}])
    assert "flash-attn needs torch >=2.2" in e.message


def test_extension_on_cpu_torch() -> None:
    e = fails(torch={"version": "2.13.0", "cuda": "cpu"}, extensions=[{"name": "flash-attn"}])
    assert "CPU build" in e.message


def test_unknown_gpu_name() -> None:
    e = fails(gpu={"targets": ["H1OO"]})
    assert "unknown GPU 'H1OO'" in e.message


def test_arm_only_gpu() -> None:
    e = fails(gpu={"targets": ["Jetson AGX Orin"]})
    assert "Jetson (Tegra)" in e.message and "L4T/JetPack" in e.hint


def test_unknown_torch_version_and_empty_specifier() -> None:
    assert "not a release torchkiln knows" in fails(torch={"version": "2.5.9"}).message
    assert "no known torch release satisfies" in fails(torch={"version": ">=9"}).message


def test_variant_not_built_for_release() -> None:
    e = fails(torch={"version": "2.0.1", "cuda": "12.4"})
    assert "not built for CUDA 12.4" in e.message


def test_cpu_with_targets_is_contradictory() -> None:
    assert "CPU build" in fails(torch={"cuda": "cpu"}, gpu={"targets": ["A100"]}).message


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_resolve_fast(path: Path) -> None:
    spec = load_spec(path)
    start = time.perf_counter()
    p = resolve(spec, load_knowledge())
    assert time.perf_counter() - start < 1.0
    assert p.image_ref


# -- a GPU's own driver floor: a driver older than the GPU's architecture does not know it ----------


def test_blackwell_targets_need_the_r570_driver_whatever_the_cuda_family_allows() -> None:
    p = plan(torch={"version": "2.7.0", "cuda": "auto"}, gpu={"targets": ["RTX 5090"]})
    assert p.torch.variant == "cu128" and p.min_driver == "570.26"  # not CUDA 12's 525.60.13
    e = fails(torch={"version": "2.7.0", "cuda": "12.8"}, gpu={"targets": ["RTX 5090"], "min_driver": "535.104"})
    assert "RTX 5090 needs driver 570.26 or newer" in e.message and "CUDA 12.8" in e.message
    assert {"gpu": {"min_driver": "570.26"}} in e.fixes
    e = fails(torch={"version": "2.7.0", "cuda": "12.8"},
              gpu={"targets": ["RTX 5090", "A100"], "min_driver": "535.104"})
    assert {"gpu": {"targets": ["A100"]}} in e.fixes  # the A100 runs on R535


def test_driver_floors_follow_the_first_toolkit_of_each_architecture() -> None:
    from torchkiln.arch import Capability

    kb = load_knowledge()
    floors = {c: kb.gpu_driver_floor(Capability.parse(c)) for c in ("7.0", "8.0", "8.9", "9.0", "10.0", "10.3", "12.0")}
    assert floors["7.0"] is None and floors["8.0"] is None  # older than every driver a CUDA 11.7+ build needs
    assert floors["8.9"][:2] == floors["9.0"][:2] == ("520.61.05", "11.8")  # Ada, Hopper: CUDA 11.8
    assert floors["10.0"][:2] == floors["12.0"][:2] == ("570.26", "12.8")  # Blackwell: CUDA 12.8
    assert floors["10.3"][:2] == ("575.51.03", "12.9")  # Blackwell Ultra (GB300): CUDA 12.9
    # an old driver and an old GPU stay fine
    assert plan(torch={"version": "2.7.0", "cuda": "11.8"}, gpu={"targets": ["A100"], "min_driver": "470.57"})
