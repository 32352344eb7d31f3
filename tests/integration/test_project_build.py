"""[project] built for real with docker and this machine's mirror (CPU torch): the fixture projects of
tests/fixtures/projects build as they are and their command runs in the image; an edit to the project's
code rebuilds only the project's wheel and the layer that installs it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(2400)]

PROJECTS = Path(__file__).parents[1] / "fixtures" / "projects"


def _copy(name: str, dest: Path) -> Path:
    shutil.copytree(PROJECTS / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest / name


def _build(engine: Engine, spec: Path, base: str, mirror: Any, context: Path, tag: str):  # type: ignore[no-untyped-def]
    options = BuildOptions(base=base, tag=tag, context_dir=context, flags=mirror.layer)
    return build_image(spec, engine, options, env={})


def _ran(summary: Any) -> list[tuple[str, str]]:
    """(stage, instruction) of every step the build ran (not taken from the cache), FROM lines aside."""
    return [(s.stage, s.name) for s in summary.steps
            if s.is_instruction and s.status == "done" and not s.name.startswith("FROM")]


@pytest.fixture
def cpu_mirror(mirror: Any) -> Any:
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    return mirror


def test_uv_lock_project_builds_runs_and_an_edit_rebuilds_only_the_project_layer(  # type: ignore[no-untyped-def]
    docker_engine: Engine, offline_base: str, cpu_mirror: Any, stable_context: Any, tmp_path: Path,
) -> None:
    project = _copy("uvlock-src", tmp_path)
    tag = f"kiln-test/project-uvlock:{os.getpid()}"
    context = stable_context("project-uvlock")
    try:
        first = _build(docker_engine, project, offline_base, cpu_mirror, context, tag)
        r = docker_engine.run(tag, ["tinyproj"], check=False)
        assert r.returncode == 0, r.stderr
        assert "tinyproj v1: torch 2.13.0+cpu, numpy 2.4.6" in r.stdout
        # the venv holds exactly the lock's versions, the project as a wheel (not editable)
        r = docker_engine.run(tag, ["python", "-c", "import importlib.metadata as m, tinyproj; "
                                    "print(m.version('six'), m.version('tinyproj'), tinyproj.__file__)"], check=False)
        assert r.stdout.split() == ["1.17.0", "0.1.0", "/opt/venv/lib/python3.11/site-packages/tinyproj/__init__.py"]
        assert first.image

        init = project / "src" / "tinyproj" / "__init__.py"
        edit = f"tinyproj v2-{time.time_ns()}"  # new each run: an earlier run's edit would be a cache hit
        init.write_text(init.read_text().replace("tinyproj v1", edit))
        second = _build(docker_engine, project, offline_base, cpu_mirror, context, tag)
        ran = _ran(second)
        stages = {stage for stage, _ in ran}
        assert stages <= {"project-build", "runtime"}, ran
        assert not any(stage == "project-deps" or stage == "torch" for stage, _ in ran)
        installs = [t for stage, t in ran if stage == "runtime" and "project-wheel" in t]
        assert len(installs) == 1, ran  # the one layer that installs the project's wheel
        r = docker_engine.run(tag, ["tinyproj"], check=False)
        assert edit in r.stdout, r.stdout + r.stderr
    finally:
        docker_engine.remove_image(tag)


def test_requirements_project_builds_and_its_train_script_runs(  # type: ignore[no-untyped-def]
    docker_engine: Engine, offline_base: str, cpu_mirror: Any, stable_context: Any, tmp_path: Path,
) -> None:
    project = _copy("requirements-train", tmp_path)
    tag = f"kiln-test/project-requirements:{os.getpid()}"
    try:
        _build(docker_engine, project, offline_base, cpu_mirror, stable_context("project-requirements"), tag)
        r = docker_engine.run(tag, [], check=False)  # the image's own command: python train.py
        assert r.returncode == 0, r.stderr
        assert "trained: weight 2.00" in r.stdout
        r = docker_engine.run(tag, ["python", "-c", "import numpy, six, torch; print(torch.__version__)"],
                              check=False)
        assert r.stdout.strip() == "2.13.0+cpu"

        # a dependency added at the end: its own step and the joint step run, no other dependency's
        reqs = project / "requirements.txt"
        # a new specifier each run (comments are not part of a requirement): an earlier run's would be cached
        reqs.write_text(reqs.read_text() + f"tqdm!=0.0.{time.time_ns()}\n")
        second = _build(docker_engine, project, offline_base, cpu_mirror, stable_context("project-requirements"), tag)
        deps = [t for stage, t in _ran(second) if stage == "project-deps"]
        assert len(deps) == 2 and "-r /kiln/project/requirements.txt" in deps[-1], deps
        assert "tqdm" in deps[0] and not any(stage == "torch" for stage, _ in _ran(second))
    finally:
        docker_engine.remove_image(tag)


def test_project_with_an_in_tree_cpp_extension_builds_and_its_op_runs(  # type: ignore[no-untyped-def]
    docker_engine: Engine, offline_base: str, cpu_mirror: Any, stable_context: Any, tmp_path: Path,
) -> None:
    project = _copy("cpp-ext", tmp_path)
    tag = f"kiln-test/project-cppext:{os.getpid()}"
    try:
        _build(docker_engine, project, offline_base, cpu_mirror, stable_context("project-cppext"), tag)
        r = docker_engine.run(tag, [], check=False)
        assert r.returncode == 0, r.stderr
        assert "cppext [3.0, 3.0, 3.0]" in r.stdout
        r = docker_engine.run(tag, ["sh", "-c", "command -v g++ || echo no-compiler"], check=False)
        assert r.stdout.strip() == "no-compiler"  # the compiler stayed in project-build
    finally:
        docker_engine.remove_image(tag)


@pytest.mark.parametrize(("name", "expected"), [
    ("monorepo", "trainer v1 with common v1: torch 2.13.0+cpu"),  # a uv workspace member and its local library
    ("extras-groups", "numpy=True tqdm=False yaml=True iniconfig=True ruff=False"),  # extra fast, group train
    ("pep723-script", "pep723: torch 2.13.0+cpu, six 1.17.0, 2.0"),  # the script's inline metadata
])
def test_fixture_project_builds_and_its_command_runs(  # type: ignore[no-untyped-def]
    name: str, expected: str, docker_engine: Engine, offline_base: str, cpu_mirror: Any, stable_context: Any,
    tmp_path: Path,
) -> None:
    project = _copy(name, tmp_path)
    tag = f"kiln-test/project-{name}:{os.getpid()}"
    try:
        _build(docker_engine, project, offline_base, cpu_mirror, stable_context(f"project-{name}"), tag)
        r = docker_engine.run(tag, [], check=False)  # the image's own command
        assert r.returncode == 0, r.stderr
        assert expected in r.stdout
    finally:
        docker_engine.remove_image(tag)
