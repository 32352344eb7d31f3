"""``kiln build --matrix`` without a daemon: builder names, scheduling, digests, the run record, and
``run_cells`` with fake engines handed in (one cell fails, the others are built; a re-run skips them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.emulation import host_platform
from torchkiln.building.invocation import BuildOptions, plan_build
from torchkiln.building.matrix import (
    Builder,
    CellRun,
    Job,
    MatrixRecord,
    ReadyBuilder,
    cell_digest,
    check_platforms,
    manifest_commands,
    parse_builder,
    plan_cell,
    push_manifests,
    run_cells,
    schedule,
)
from torchkiln.building.sources import Sources
from torchkiln.engines import ApptainerEngine, DockerEngine, EngineInfo
from torchkiln.engines.engine import BuildCommand, BuildEvent, BuildOutcome, ImageDetails, StepRecord
from torchkiln.errors import BuildError, InputError
from torchkiln.knowledge import load_knowledge
from torchkiln.matrix import cell_tags, expand, resolve_matrix, torch_layer_key
from torchkiln.runner import Runner
from torchkiln.spec import parse_spec

CLASSIC = EngineInfo("docker", "/usr/bin/docker", "20.10.24", "20.10.24", "buildkit")
BUILDX = EngineInfo("docker", "/usr/bin/docker", "27.3.1", "27.3.1", "buildx")


# -- builder names ----------------------------------------------------------------------------------


def test_builder_names_become_the_environment_that_points_docker_at_them() -> None:
    contexts = {"default", "gpu-box"}.__contains__
    assert parse_builder("unix:///run/d2.sock", contexts=contexts, buildx=None).env == {"DOCKER_HOST": "unix:///run/d2.sock"}
    assert parse_builder("ssh://ci@arm-1", contexts=contexts, buildx=None).kind == "host"
    ctx = parse_builder("gpu-box", contexts=contexts, buildx=None)
    assert ctx.kind == "context" and ctx.env == {"DOCKER_CONTEXT": "gpu-box"} and ctx.unset == ("DOCKER_HOST",)
    bx = parse_builder("k8s-pool", contexts=contexts, buildx={"k8s-pool"}.__contains__)
    assert bx.kind == "buildx" and bx.env == {"BUILDX_BUILDER": "k8s-pool"}


@pytest.mark.parametrize(
    ("name", "buildx", "needle"),
    [
        ("http://host:2375", None, "not a Docker address"),
        ("my builder", None, "neither a Docker address"),
        ("nosuch", None, "buildx .* is not installed"),
        ("nosuch", set(), "nor a buildx builder"),
    ],
)
def test_unknown_builders_are_refused_with_the_way_to_name_one(name: str, buildx: set[str] | None,
                                                               needle: str) -> None:
    with pytest.raises(InputError, match=needle) as e:
        parse_builder(name, contexts=lambda _: False, buildx=None if buildx is None else buildx.__contains__)
    assert "docker context" in e.value.hint or "unix://" in e.value.hint


# -- scheduling -------------------------------------------------------------------------------------

AMD = ("linux/amd64",)


def cells_of(queues: dict[str, list[Job]]) -> dict[str, list[int]]:
    return {n: [j.cell for j in q] for n, q in queues.items()}


def test_a_torch_layer_group_stays_together_until_a_builder_idles() -> None:
    jobs = [Job(i, 0, "linux/amd64") for i in (1, 2, 3)]
    assert cells_of(schedule(jobs, [("a", AMD), ("b", AMD)])) == {"a": [1, 2], "b": [3]}
    two_groups = [Job(1, 0, "linux/amd64"), Job(2, 1, "linux/amd64"), Job(3, 0, "linux/amd64"),
                  Job(4, 1, "linux/amd64")]
    assert cells_of(schedule(two_groups, [("a", AMD), ("b", AMD)])) == {"a": [1, 3], "b": [2, 4]}


def test_platforms_decide_where_a_cell_may_go_unless_emulated() -> None:
    jobs = [Job(1, 0, "linux/amd64"), Job(2, 1, "linux/arm64"), Job(3, 2, "linux/arm64")]
    builders = [("x86", AMD), ("arm", ("linux/arm64",))]
    assert cells_of(schedule(jobs, builders)) == {"x86": [1], "arm": [2, 3]}
    assert cells_of(schedule(jobs, [("x86", AMD)], emulate=True)) == {"x86": [1, 2, 3]}


def test_a_platform_no_builder_has_is_refused_before_building() -> None:
    s = parse_spec({"image": {"name": "a"}, "torch": {"version": "2.13.0", "cuda": "cpu"},
                    "matrix": {"platform": ["linux/amd64", "linux/arm64"]}})
    cells = cell_tags(s, resolve_matrix(expand(s), load_knowledge()))
    engine = DockerEngine(CLASSIC, Runner())
    pool = [ReadyBuilder(Builder("default", "context", {}), engine, AMD, "d1")]
    with pytest.raises(InputError, match=r"no builder builds linux/arm64: the builders are default \(linux/amd64\)"):
        check_platforms(cells, pool, emulate=False)
    check_platforms(cells, pool, emulate=True)


def test_manifest_lists_use_insecure_only_for_loopback_registries() -> None:
    local = manifest_commands("docker", "127.0.0.1:5000/t:py3.11", ["127.0.0.1:5000/t:py3.11-amd64",
                                                                    "127.0.0.1:5000/t:py3.11-arm64"])
    assert local == [["docker", "manifest", "create", "--amend", "--insecure", "127.0.0.1:5000/t:py3.11",
                      "127.0.0.1:5000/t:py3.11-amd64", "127.0.0.1:5000/t:py3.11-arm64"],
                     ["docker", "manifest", "push", "--purge", "--insecure", "127.0.0.1:5000/t:py3.11"]]
    remote = manifest_commands("docker", "ghcr.io/acme/t:x", ["ghcr.io/acme/t:x-amd64"])
    assert "--insecure" not in remote[0] + remote[1]


# -- planning: platform, digest ---------------------------------------------------------------------


def matrix_cells(tmp_path: Path, pip: list[list[str]], platform: str | None = None) -> tuple[Any, Path]:
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir(exist_ok=True)
    image = {"name": "kiln-test/m", **({"platform": platform} if platform else {})}
    s = parse_spec({"image": image, "torch": {"version": "2.13.0", "cuda": "cpu"},
                    "base": {"image": "kiln-base:bookworm"}, "matrix": {"pip": pip}})
    return cell_tags(s, resolve_matrix(expand(s), load_knowledge())), spec_dir


def test_platform_is_spelled_for_docker_and_refused_by_apptainer(tmp_path: Path) -> None:
    cells, spec_dir = matrix_cells(tmp_path, [["six"]])
    plan = cells[0].plan
    arm_cells, _ = matrix_cells(tmp_path, [["six"]], platform="linux/arm64")
    inv = plan_build(arm_cells[0].plan, spec_dir, BuildOptions(platform="linux/arm64", context_dir=tmp_path / "c"),
                     DockerEngine(CLASSIC, Runner()), Sources(), cwd=tmp_path)
    argv = list(inv.command.argv)
    assert argv[argv.index("--platform") + 1] == "linux/arm64" and inv.to_dict()["platform"] == "linux/arm64"
    plain = plan_build(plan, spec_dir, BuildOptions(context_dir=tmp_path / "c"), DockerEngine(CLASSIC, Runner()),
                       Sources(), cwd=tmp_path)
    assert ("--platform" in plain.command.argv) == (host_platform() != "linux/amd64")
    # a plan resolved for amd64 is not built as arm64: its wheels were chosen for amd64
    with pytest.raises(InputError, match="differs from the plan's platform"):
        plan_build(plan, spec_dir, BuildOptions(platform="linux/arm64"), DockerEngine(CLASSIC, Runner()), Sources(),
                   cwd=tmp_path)
    app = ApptainerEngine(EngineInfo("apptainer", "apptainer", "apptainer 1.3", "", "apptainer"), Runner())
    with pytest.raises(InputError, match="no --platform"):
        plan_build(plan, spec_dir, BuildOptions(platform="linux/arm64"), app, Sources(), cwd=tmp_path)


def test_the_digest_is_what_the_image_depends_on_not_the_builder(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cells, spec_dir = matrix_cells(tmp_path, [["six"], ["idna"]])
    a = plan_cell(cells[0], spec_dir, BuildOptions(), DockerEngine(CLASSIC, Runner()),
                  cwd=tmp_path, group=0, env={})
    b = plan_cell(cells[0], spec_dir, BuildOptions(), DockerEngine(BUILDX, Runner()),
                  cwd=tmp_path, group=0, env={})
    c = plan_cell(cells[1], spec_dir, BuildOptions(), DockerEngine(CLASSIC, Runner()),
                  cwd=tmp_path, group=0, env={})
    assert a.digest == b.digest == cell_digest(a.invocation) and a.digest != c.digest
    # the secrets' files live in each run's own scratch folder: a re-run (another process) has other paths
    import dataclasses
    runs = [dataclasses.replace(a.invocation, secrets={"uv_toml": tmp_path / f"scratch-{pid}" / "uv.toml"})
            for pid in (101, 202)]
    assert cell_digest(runs[0]) == cell_digest(runs[1])
    assert a.invocation.context != c.invocation.context  # each cell has a context folder of its own
    pushed = plan_cell(cells[0], spec_dir, BuildOptions(push=True), DockerEngine(CLASSIC, Runner()),
                       cwd=tmp_path, group=0, env={})
    assert pushed.digest != a.digest  # an image built without --push is not done for a run with it
    assert torch_layer_key(cells[0].plan) == torch_layer_key(cells[1].plan)


# -- running with fake engines ----------------------------------------------------------------------


class FakeDocker(DockerEngine):
    """Builds nothing: fails cells whose requirements name ``kiln-fail``, 'builds' the others."""

    def __init__(self, name: str) -> None:
        super().__init__(CLASSIC, Runner())
        self.name_ = name
        self.images: dict[str, str] = {}
        self.built: list[str] = []

    def run_build(self, command: BuildCommand, *, secrets: Mapping[str, Path] | None = None,
                  labels: Mapping[str, str] | None = None,
                  progress: Callable[[BuildEvent], None] | None = None) -> BuildOutcome:
        context = Path(command.argv[-1])
        if "kiln-fail" in (context / ".kiln" / "requirements.txt").read_text():
            raise BuildError("docker build failed at stage 'packages'.", details="line 1\nno such package kiln-fail")
        image_id = f"sha256:{self.name_}{len(self.built)}"
        command.writes.write_text(image_id)
        self.built.append(str(context))
        return BuildOutcome(image_id, 1.0, (StepRecord("#1", "torch", "RUN uv pip install torch", "done", 1.0),))

    def image_exists(self, image: str) -> bool:
        return image in self.images or image == "kiln-base:bookworm"

    def pull(self, image: str, *, timeout: float | None = 120) -> bool:
        return False

    def inspect_image(self, image: str) -> ImageDetails:
        return ImageDetails(self.images.get(image, "sha256:base"), 1, 1, "", (), {}, "")

    def tag(self, source: str, ref: str) -> None:
        self.images[ref] = source

    def push(self, image: str) -> str:
        return ""


def test_one_failing_cell_leaves_the_others_built_and_a_rerun_builds_only_it(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cells, spec_dir = matrix_cells(tmp_path, [["six"], ["idna"], ["kiln-fail==1"]])
    a, b = FakeDocker("a"), FakeDocker("b")
    pool = {"a": ReadyBuilder(Builder("a", "host", {}), a, AMD, "da"),
            "b": ReadyBuilder(Builder("b", "host", {}), b, AMD, "db")}
    planned = [plan_cell(c, spec_dir, BuildOptions(), a, cwd=tmp_path, group=0, env={})
               for c in cells]
    record = MatrixRecord.for_spec(spec_dir / "kiln.toml", "kiln-test/m")
    queues = cells_of(schedule([Job(p.index, 0, "linux/amd64") for p in planned], [("a", AMD), ("b", AMD)]))
    runs = [CellRun(p, name) for name, idx in queues.items() for p in planned if p.index in idx]
    seen: list[tuple[int, str]] = []
    run_cells(runs, pool, record, notify=lambda r: seen.append((r.index, r.status)))
    status = {r.index: r.status for r in runs}
    assert status == {1: "built", 2: "built", 3: "failed"}
    failed = next(r for r in runs if r.index == 3)
    assert "no such package kiln-fail" in failed.log_tail() and failed.to_dict()["error"]["log_tail"]
    assert (1, "building") in seen and (3, "failed") in seen
    assert len(a.built) + len(b.built) == 2

    # the record says what is done; a fresh load (the next run) skips the built cells only
    again = MatrixRecord.for_spec(spec_dir / "kiln.toml", "kiln-test/m")
    assert [again.done(p, pool) is not None for p in planned] == [True, True, False]
    # an image that is gone from its builder (or replaced) is built again
    holder = pool[again.cells[planned[0].rc.image]["builder"]].engine
    holder.images[planned[0].rc.image] = "sha256:other"  # type: ignore[attr-defined]
    assert again.done(planned[0], pool) is None
    # a builder that left the pool: only a pushed image counts as done
    assert again.done(planned[1], {}) is None


def test_push_manifests_skips_groups_with_a_failed_cell(tmp_path: Path) -> None:
    s = parse_spec({"image": {"name": "127.0.0.1:5000/t"}, "torch": {"version": "2.13.0", "cuda": "cpu"},
                    "matrix": {"platform": ["linux/amd64", "linux/arm64"]}})
    cells = cell_tags(s, resolve_matrix(expand(s), load_knowledge()))
    engine = DockerEngine(CLASSIC, Runner())
    planned = [plan_cell(c, tmp_path, BuildOptions(), engine, cwd=tmp_path, group=0, env={})
               for c in cells]
    runs = [CellRun(planned[0], "a", status="built"), CellRun(planned[1], "b", status="failed")]
    (result,) = push_manifests(runs, Runner(), "/nonexistent/docker")
    assert result.status == "skipped" and "t:torch2.13.0-cpu-py3.11-arm64" in result.reason
    assert result.ref == "127.0.0.1:5000/t:torch2.13.0-cpu-py3.11"


def test_cell_runs_report_what_json_prints(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cells, spec_dir = matrix_cells(tmp_path, [["six"]])
    p = plan_cell(cells[0], spec_dir, BuildOptions(), DockerEngine(CLASSIC, Runner()),
                  cwd=tmp_path, group=0, env={})
    d = dataclasses.asdict(p.rc.cell) and CellRun(p, "a").to_dict()
    assert d["image"] == "kiln-test/m:torch2.13.0-cpu-py3.11-pip-six" and d["status"] == "queued"
    assert d["builder"] == "a" and len(d["digest"]) == 64


def test_matrix_options_without_matrix_are_usage_errors(capsys: Any, tmp_path: Path) -> None:
    from torchkiln.cli import main

    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n')
    for extra in (["--builders", "default"], ["--force"], ["--jobs", "2"], ["--skip-impossible"]):
        assert main(["build", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert "add --matrix" in err and "Traceback" not in err


def test_with_jobs_a_groups_first_cell_finishes_before_its_others_start(tmp_path: Path, monkeypatch: Any) -> None:
    import threading
    import time

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cells, spec_dir = matrix_cells(tmp_path, [["six"], ["idna"], ["attrs"], ["packaging"]])
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    class Slow(FakeDocker):
        def run_build(self, command: BuildCommand, **kw: Any) -> BuildOutcome:
            index = next(p.index for p in planned if p.invocation.context == Path(command.argv[-1]))
            with lock:
                events.append(("start", index))
            time.sleep(0.2)
            with lock:
                events.append(("end", index))
            return super().run_build(command, **kw)

    engine = Slow("a")
    pool = {"a": ReadyBuilder(Builder("a", "host", {}), engine, AMD, "da")}
    groups = {1: 0, 2: 0, 3: 0, 4: 1}  # cells 1-3 share a torch layer, cell 4 has its own
    planned = [plan_cell(c, spec_dir, BuildOptions(), engine, cwd=tmp_path,
                         group=groups[c.cell.index], env={}) for c in cells]
    runs = [CellRun(p, "a") for p in planned]
    run_cells(runs, pool, MatrixRecord.for_spec(spec_dir / "kiln.toml", "m"), jobs=2)
    assert all(r.status == "built" for r in runs)
    order = events.index
    assert order(("start", 4)) < order(("end", 1))  # another group's first cell runs beside cell 1
    assert order(("end", 1)) < order(("start", 2)) and order(("end", 1)) < order(("start", 3))
