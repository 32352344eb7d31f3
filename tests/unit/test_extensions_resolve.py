"""Spec and resolver decisions for compiled extensions and torch from source."""

from __future__ import annotations

from typing import Any

import pytest

from torchkiln.errors import ResolveError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.resolve import resolve
from torchkiln.spec import parse_spec


def plan(**tables: Any) -> BuildPlan:
    return resolve(parse_spec({"image": {"name": "acme/x"}, **tables}), load_knowledge())


def fails(**tables: Any) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    return e.value


def bad_spec(**tables: Any) -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_spec({"image": {"name": "acme/x"}, **tables})
    return e.value


# -- spec ------------------------------------------------------------------------------------------


def test_torch_source_needs_an_exact_version_and_a_cuda_toolkit() -> None:
    assert "exact release" in bad_spec(torch={"source": "git", "version": ">=2.5", "cuda": "12.6"}).message
    assert "set cuda" in bad_spec(torch={"source": "git", "version": "2.5.1"}).message
    assert "set cuda" in bad_spec(torch={"source": "git", "version": "2.5.1", "cuda": "cpu"}).message
    assert "only with source" in bad_spec(torch={"ref": "v2.5.1"}).message
    assert "git repository URL" in bad_spec(
        torch={"source": "git", "version": "2.5.1", "cuda": "12.6", "git": "not a url"}).message
    assert "git tag" in bad_spec(torch={"source": "git", "version": "2.5.1", "cuda": "12.6", "ref": "a..b"}).message


def test_extension_tables_are_strict() -> None:
    assert "not 'version' and 'path'" in bad_spec(extensions=[{"name": "x", "version": "1", "path": "ext/x"}]).message
    assert "'path' and 'git'" in bad_spec(
        extensions=[{"name": "x", "path": "ext/x", "git": "https://example.org/x"}]).message
    assert "inside the spec's folder" in bad_spec(extensions=[{"name": "x", "path": "../x"}]).message
    assert "inside the spec's folder" in bad_spec(extensions=[{"name": "x", "path": "/abs"}]).message
    assert "local 'path' has none" in bad_spec(extensions=[{"name": "x", "path": "ext/x", "ref": "v1"}]).message
    assert "environment variable" in bad_spec(extensions=[{"name": "x", "env": {"BAD-NAME": "1"}}]).message
    assert "package name" in bad_spec(extensions=[{"name": "x y"}]).message
    e = bad_spec(extensions=[{"name": "x", "prebuild": False}])
    assert "unknown key 'prebuild'" in e.message and "prebuilt" in e.message


# -- extensions --------------------------------------------------------------------------------------


def test_flash_attn_gets_its_own_arch_variable_and_build_requirements() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["A100", "H100", "B200"]},
             extensions=[{"name": "flash-attn", "version": "2.8.3"}])
    (fa,) = p.extensions
    env = dict(fa.env)
    assert p.arch_list == "8.0;9.0;10.0+PTX"
    assert env["FLASH_ATTN_CUDA_ARCHS"] == "80;90;100" and env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert fa.build == "source" and fa.no_build_isolation and "psutil" in fa.build_requires
    d = next(d for d in p.decisions if d.topic == "extension flash-attn")
    assert "do not match CUDA 13" in d.why and "FLASH_ATTN_CUDA_ARCHS=80;90;100" in d.why


def test_exact_prebuilt_flash_attn_wheel_is_used_and_said() -> None:
    p = plan(python={"version": "3.12"}, torch={"version": "2.7.1", "cuda": "12.8"},
             gpu={"targets": ["RTX 4090", "H100"]}, extensions=[{"name": "flash-attn", "version": "2.8.3"}])
    (fa,) = p.extensions
    assert fa.build == "prebuilt"
    assert fa.prebuilt == (
        "flash-attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"
        "flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl")
    d = next(d for d in p.decisions if d.topic == "extension flash-attn")
    assert d.choice == "prebuilt wheel" and "matches exactly" in d.why
    assert p.toolchain is None  # nothing is compiled: no compiler at all, and no CUDA 12 devel image needed


@pytest.mark.parametrize("tables, why", [
    ({"python": {"version": "3.14"}, "torch": {"version": "2.8.0", "cuda": "12.8"}}, "Python 3.14"),
    ({"torch": {"version": "2.6.0", "cuda": "12.6"}}, "torch 2.6"),
    ({"torch": {"version": "2.14.1", "cuda": "13.0"}}, "CUDA 13"),
])
def test_prebuilt_is_refused_unless_everything_matches(tables: dict[str, Any], why: str) -> None:
    kb = load_knowledge()
    spec = parse_spec({"image": {"name": "a"}, "gpu": {"targets": ["A100"]}, "python": {"version": "3.12"},
                       "base": {"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "python": "apt"},
                       "extensions": [{"name": "flash-attn", "version": "2.8.3"}], **tables})
    try:
        p = resolve(spec, kb)
    except ResolveError as e:  # e.g. Python 3.14 wheels of torch 2.8 do not exist at all
        assert why.split()[0] in e.message
        return
    (fa,) = p.extensions
    assert fa.build == "source" and fa.prebuilt is None
    assert why in next(d.why for d in p.decisions if d.topic == "extension flash-attn")


def test_prebuilt_can_be_turned_off() -> None:
    p = plan(python={"version": "3.12"}, torch={"version": "2.7.1", "cuda": "12.8"}, gpu={"targets": ["H100"]},
             base={"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "python": "apt"},
             extensions=[{"name": "flash-attn", "version": "2.8.3", "prebuilt": False}])
    assert p.extensions[0].build == "source"
    assert "prebuilt = false" in next(d.why for d in p.decisions if d.topic == "extension flash-attn")


def test_xformers_wheel_from_the_index_when_its_torch_pair_matches() -> None:
    p = plan(torch={"version": "2.5.1"}, gpu={"targets": ["A100"]},
             extensions=[{"name": "xformers", "version": "0.0.29"}])
    (xf,) = p.extensions
    assert p.torch.on_default_index and xf.build == "prebuilt" and xf.prebuilt == "xformers==0.0.29"
    assert p.toolchain is None


def test_apex_is_built_from_a_pinned_git_ref() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["H100"]},
             extensions=[{"name": "apex", "ref": "25.09"}])
    (apex,) = p.extensions
    assert apex.git == "https://github.com/NVIDIA/apex" and apex.ref == "25.09" and apex.requirement is None
    assert apex.spec == "apex @ git+https://github.com/NVIDIA/apex@25.09"
    assert dict(apex.env) == {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}
    assert p.toolchain is not None and "git" in p.toolchain.apt


def test_git_builds_need_a_ref_and_apex_is_not_on_the_index() -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, extensions=[{"name": "apex"}])
    assert "needs a pinned ref" in e.message and "ref =" in (e.hint or "")
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, extensions=[{"name": "apex", "version": "0.1"}])
    assert "not released on the package index" in e.message
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"},
              extensions=[{"name": "mine", "git": "https://example.org/mine"}])
    assert "needs a pinned ref" in e.message
    e = fails(torch={"version": "2.14.1", "cuda": "13.0"}, extensions=[{"name": "flash-attn", "ref": "v2.8.3"}])
    assert "not built from a repository" in e.message


def test_custom_git_extension() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["H100"]},
             extensions=[{"name": "my-kernels", "git": "https://example.org/org/my-kernels", "ref": "v1.2.0"}])
    (e,) = p.extensions
    assert e.spec == "my-kernels @ git+https://example.org/org/my-kernels@v1.2.0" and e.build == "source"
    assert any("not in the knowledge base" in w for w in p.warnings)


# -- toolchain ---------------------------------------------------------------------------------------


def test_cuda13_compiler_comes_from_nvidias_wheels() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["H100"]},
             extensions=[{"name": "my-op", "path": "ext/my_op"}])
    tc = p.toolchain
    assert tc is not None and tc.kind == "wheels" and tc.cuda == "13.0" and tc.image == ""
    assert tc.compiler == ("cuda-toolkit[nvcc,cccl,crt,nvvm,cudart]==13.0.*",)
    assert "MEASURED" in tc.source


def test_cuda12_on_a_slim_base_is_refused_with_the_way_out() -> None:
    e = fails(torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["A100"]},
              extensions=[{"name": "flash-attn", "version": "2.7.4.post1"}])
    assert "carry ptxas only" in e.message
    assert "nvidia/cuda:12.4.1-runtime-ubuntu22.04" in (e.hint or "") and 'cuda = "13.' in (e.hint or "") and e.fixes


def test_cuda12_builds_on_the_devel_sibling_of_an_nvidia_runtime_base() -> None:
    p = plan(python={"version": "3.10"}, torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["A100"]},
             base={"image": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "python": "apt"},
             extensions=[{"name": "flash-attn", "version": "2.7.4.post1"}])
    tc = p.toolchain
    assert tc is not None and tc.kind == "image" and tc.image == "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    assert not p.warnings


def test_devel_base_is_used_but_warned_about() -> None:
    p = plan(python={"version": "3.10"}, torch={"version": "2.5.1", "cuda": "12.4"}, gpu={"targets": ["A100"]},
             base={"image": "nvidia/cuda:12.4.1-devel-ubuntu22.04", "python": "apt"},
             extensions=[{"name": "flash-attn", "version": "2.7.4.post1"}])
    assert p.toolchain is not None and p.toolchain.kind == "image" and p.toolchain.image == ""
    assert any("runtime stage has a compiler" in w for w in p.warnings)


def test_devel_base_of_another_cuda_falls_back_to_wheels() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0"}, gpu={"targets": ["H100"]}, python={"version": "3.12"},
             base={"image": "nvidia/cuda:12.8.1-devel-ubuntu24.04", "python": "apt"},  # noble's Python is 3.12
             extensions=[{"name": "my-op", "path": "ext/my_op"}])
    assert p.toolchain is not None and p.toolchain.kind == "wheels"
    assert any("has CUDA 12.8, not torch's 13.0" in w for w in p.warnings)


def test_no_toolchain_without_compiled_code() -> None:
    assert plan(torch={"version": "2.14.1"}, gpu={"targets": ["H100"]}).toolchain is None


# -- torch from source -------------------------------------------------------------------------------


def test_torch_from_source_covers_what_no_wheel_covers() -> None:
    # no official 2.7 wheel has both Volta (dropped from cu128) and Blackwell (not in cu126)
    e = fails(torch={"version": "2.7.1", "cuda": "12.8"}, gpu={"targets": ["V100", "B200"]})
    assert "no kernel image for V100" in e.message and "build torch from source" in (e.hint or "")
    p = plan(python={"version": "3.12"}, torch={"version": "2.7.1", "cuda": "12.8", "source": "git"},
             gpu={"targets": ["V100", "B200"]},
             base={"image": "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04", "python": "apt"})
    b = p.torch.build
    assert b is not None and b.ref == "v2.7.1" and b.version == "2.7.1+cu128"
    assert p.arch_list == "7.0;10.0+PTX" and p.torch.wheel_arch_list == "7.0;10.0+PTX"
    assert all(t.covered and "compiled from source" in t.how for t in p.targets)
    assert p.torch.requirement == "torch==2.7.1"
    env = dict(b.env)
    assert env["USE_CUDA"] == env["USE_CUDNN"] == env["USE_NCCL"] == env["USE_DISTRIBUTED"] == "1"
    assert env["BUILD_TEST"] == "0" and env["CMAKE_GENERATOR"] == "Ninja"
    assert any(d.topic == "torch build" for d in p.decisions)
    assert not any(d.topic == "wheel archs" for d in p.decisions)


def test_torch_from_source_checks_the_toolkit_and_driver() -> None:
    e = fails(torch={"version": "2.14.1", "cuda": "13.0", "source": "git"}, gpu={"targets": ["V100"]})
    assert "CUDA 13.0 cannot compile for V100" in e.message
    e = fails(torch={"version": "2.14.1", "cuda": "13.0", "source": "git"}, gpu={"targets": ["H100"],
                                                                                  "min_driver": "550.54"})
    assert "needs driver" in e.message


def test_plan_json_carries_the_build_decisions() -> None:
    p = plan(torch={"version": "2.14.1", "cuda": "13.0", "source": "git"}, gpu={"targets": ["H100"]},
             extensions=[{"name": "my-op", "path": "ext/my_op"}])
    d = p.to_dict()
    assert d["torch_build"]["ref"] == "v2.14.1" and d["toolchain"]["kind"] == "wheels"
    assert d["extensions"][0]["build"] == "source" and d["extensions"][0]["path"] == "ext/my_op"
