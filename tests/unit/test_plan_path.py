"""One planning path: every build, a single spec's or a matrix cell's, is planned by ``plan_invocation``
into an invocation whose kind follows from the engine's facts; and only ``engines/`` names an engine.

No daemon: the engines here answer "no such image" and spell commands; nothing is patched.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from torchkiln.building.emulation import host_platform
from torchkiln.building.invocation import (
    BuildOptions,
    ImageBuild,
    SifBuild,
    plan_invocation,
    plan_spec,
)
from torchkiln.building.matrix import cell_context_dir, plan_cell
from torchkiln.engines import ENGINE_NAMES, ApptainerEngine, DockerEngine, EngineInfo, PodmanEngine
from torchkiln.errors import InputError
from torchkiln.load import load_plan
from torchkiln.matrix import Cell, ResolvedCell
from torchkiln.provenance import Provenance
from torchkiln.runner import Runner

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src" / "torchkiln"
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


class _NoDaemon:
    """An engine's facts and spelling without its daemon: no image is in its store or pullable."""

    def image_exists(self, image: str) -> bool:
        return False

    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool:
        return False


class Docker(_NoDaemon, DockerEngine):
    pass


class Podman(_NoDaemon, PodmanEngine):
    pass


ENGINES = {
    "docker": Docker(EngineInfo("docker", "/usr/bin/docker", "27.3.1", "27.3.1", "buildx"), Runner()),
    "podman": Podman(EngineInfo("podman", "/usr/bin/podman", "4.3.1", "4.3.1", "buildah"), Runner()),
    "apptainer": ApptainerEngine(EngineInfo("apptainer", "/usr/bin/apptainer", "apptainer 1.3.4", "", "x"),
                                 Runner(), fakeroot=True),
}
KIND = {"image": ImageBuild, "sif": SifBuild}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_engine_kind_is_planned_by_the_one_path(spec: Path, engine_name: str,
                                                                  tmp_path: Path) -> None:
    engine = ENGINES[engine_name]
    spec_obj, plan, spec_dir = load_plan(spec, facts=lambda image: None)
    spec_dir = spec_dir.resolve()
    provenance = Provenance.of(spec, Runner(), {})
    sif = engine.info.output == "sif"
    options = BuildOptions(context_dir=tmp_path / "ctx", tag=str(tmp_path / "out.sif") if sif else None)
    if sif and plan.platform != host_platform():
        with pytest.raises(InputError, match="builds for the machine it runs on"):
            plan_spec(spec, engine, options, env={})
        return
    # kiln build SPEC: the spec loaded, then the one planning step
    single = plan_spec(spec, engine, options, env={})
    direct = plan_invocation(plan, spec_dir, options, engine, provenance=provenance, env={}, cwd=Path.cwd())
    assert single == direct
    assert isinstance(single, KIND[engine.info.output])  # the engine's facts choose the kind, not its name
    if sif:  # a .sif: no tags, no push, no labels from outside; matrices build on Docker builders only
        assert single.tags == () and not single.push and single.labels == {}
        return
    assert single.labels["org.opencontainers.image.version"] == plan.tag
    # a matrix cell: the same step with the cell's tag, context and platform, once, whichever builder runs it
    cell = ResolvedCell(Cell(1, (), spec_obj), plan, None, tag=f"{plan.tag}-cell1")
    planned = plan_cell(cell, spec_dir, BuildOptions(), engine, cwd=tmp_path, group=0, env={},
                        provenance=provenance, digest_of=lambda base: "")
    cell_options = dataclasses.replace(BuildOptions(), tag=cell.image, platform=plan.platform,
                                       context_dir=cell_context_dir(cell.image, spec_dir))
    assert planned.invocation == plan_invocation(plan, spec_dir, cell_options, engine, provenance=provenance,
                                                 version=cell.tag, env={}, cwd=tmp_path)
    assert planned.invocation.labels["org.opencontainers.image.version"] == cell.tag
    argv = list(planned.invocation.command.argv)
    assert argv[argv.index("--platform") + 1] == plan.platform  # a cell always names its platform


def test_the_two_kinds_print_the_same_dry_run_keys(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "cpu.toml"
    if host_platform() != "linux/amd64":
        pytest.skip("the .sif of the amd64 example builds on amd64 only")
    image = plan_spec(spec, ENGINES["docker"], BuildOptions(context_dir=tmp_path / "a"), env={})
    sif = plan_spec(spec, ENGINES["apptainer"], BuildOptions(context_dir=tmp_path / "b", tag=str(tmp_path / "x.sif")),
                    env={})
    assert isinstance(image, ImageBuild) and isinstance(sif, SifBuild)
    assert image.to_dict().keys() == sif.to_dict().keys()  # --dry-run --json keeps one shape
    assert sif.output_file == sif.command.writes and image.output_file is None


# -- engine differences live in engines/ --------------------------------------------------------------


def _engine_name_comparisons(path: Path) -> list[str]:
    """``x == "docker"``, ``name in ("docker", "podman")`` …: comparisons with an engine's name (``fmt``,
    an output format such as ``kiln render --format apptainer``, names a file format, not an engine)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        if isinstance(node.left, ast.Name) and node.left.id == "fmt":
            continue
        for operand in (node.left, *node.comparators):
            values = [operand] + (list(operand.elts) if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [])
            if any(isinstance(v, ast.Constant) and v.value in ENGINE_NAMES for v in values):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_no_module_outside_engines_compares_an_engine_name() -> None:
    modules = [*sorted((SRC / "building").rglob("*.py")), *sorted((SRC / "cli").rglob("*.py")), SRC / "load.py"]
    found = [hit for m in modules for hit in _engine_name_comparisons(m)]
    assert found == [], f"branch on engine facts (EngineInfo.output, .cross_platform, …), not names: {found}"
    # the check sees what it looks for
    assert _engine_name_comparisons(SRC / "engines" / "engine.py")
