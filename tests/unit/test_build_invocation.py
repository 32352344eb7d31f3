"""The build, planned and executed: ``plan_build`` for every example and engine without a daemon, and
``execute`` with a fake engine handed in (it records what it is asked to do; nothing is patched)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torchkiln.building.emulation import base_for_platform, host_platform
from torchkiln.building.execute import execute
from torchkiln.building.invocation import BuildInvocation, BuildOptions, engine_platform, plan_build, scratch_dir
from torchkiln.building.sources import Sources
from torchkiln.contract import SECRET_CA, SECRET_UV
from torchkiln.engines import ApptainerEngine, DockerEngine, EngineInfo, PodmanEngine
from torchkiln.engines.engine import BuildCommand, BuildEvent, BuildOutcome, ImageDetails, StepRecord
from torchkiln.errors import BuildError, InputError, SpecError
from torchkiln.load import load_plan
from torchkiln.runner import Completed, Runner

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
CPU = ROOT / "examples" / "cpu.toml"

ENGINES = {
    "docker-buildx": DockerEngine(EngineInfo("docker", "/usr/bin/docker", "27.3.1", "27.3.1", "buildx"), Runner()),
    "docker-classic": DockerEngine(EngineInfo("docker", "/usr/bin/docker", "20.10.24", "20.10.24", "buildkit"),
                                   Runner()),
    "podman": PodmanEngine(EngineInfo("podman", "/usr/bin/podman", "4.3.1", "4.3.1", "buildah"), Runner()),
    "apptainer": ApptainerEngine(EngineInfo("apptainer", "/usr/bin/apptainer", "apptainer 1.3.4", "", "x"),
                                 Runner(), fakeroot=True),
}


def _plan(spec: Path):  # type: ignore[no-untyped-def]
    _spec, plan, spec_dir = load_plan(spec, facts=lambda image: None)  # a vendor base: its knowledge row
    return plan, spec_dir


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_plans_for_every_engine_without_a_daemon(spec: Path, engine_name: str, tmp_path: Path) -> None:
    engine = ENGINES[engine_name]
    plan, spec_dir = _plan(spec)
    ca = tmp_path / "ca.pem"
    sources = Sources(index_url="https://pypi.example/simple", ca_bundle=str(ca))
    options = BuildOptions(context_dir=tmp_path / "ctx", base="kiln-base:bookworm")
    if plan.torch.image is not None:  # torch is the base image's: another base would not have its facts
        with pytest.raises(SpecError, match="--base kiln-base:bookworm would replace"):
            plan_build(plan, spec_dir, options, engine, sources, cwd=tmp_path)
        options = dataclasses.replace(options, base=None)
    if engine_name == "apptainer" and plan.platform != host_platform():
        with pytest.raises(InputError, match="apptainer builds for the machine it runs on"):
            plan_build(plan, spec_dir, options, engine, sources, cwd=tmp_path)
        return
    inv = plan_build(plan, spec_dir, options, engine, sources, cwd=tmp_path)
    again = plan_build(plan, spec_dir, options, engine, sources, cwd=tmp_path)
    assert inv == again  # pure: the same inputs give the same invocation
    ctx = (tmp_path / "ctx").resolve()
    argv = list(inv.command.argv)
    assert argv[0] == engine.info.binary and inv.context == ctx
    assert inv.scratch == scratch_dir(ctx) and inv.scratch.is_relative_to(tmp_path / "cache")
    assert inv.secrets == {SECRET_UV: inv.scratch / "secrets" / "uv.toml", SECRET_CA: ca}
    assert "Dockerfile" in inv.files.texts or "kiln.def" in inv.files.texts
    assert ".kiln/bin/uv" in inv.files.copies
    json.dumps(inv.to_dict())  # what --dry-run --json prints
    if engine_name == "apptainer":
        dest = spec_dir.resolve() / f"{plan.image_name.rsplit('/', 1)[-1]}_{plan.tag}.sif"
        assert inv.image == str(dest) and inv.tags == () and inv.command.cwd == ctx
        assert argv[-2:] == [str(inv.command.writes), str(ctx / "kiln.def")]
        assert inv.command.writes.parent.parent == dest.parent  # beside it: os.replace stays on one disk
        assert "--fakeroot" in argv
    else:
        assert inv.image == plan.image_ref and inv.tags == (plan.image_ref,)
        # the bootstrapped base of the plan's platform: kiln-base:bookworm, or its -arm64 sibling
        assert inv.base_image == base_for_platform(options.base or plan.base_image, plan.platform)
        assert plan.platform == inv.platform == inv.to_dict()["platform"]
        spelled = engine_platform(plan.platform, None)
        assert (argv[argv.index("--platform") + 1] if "--platform" in argv else None) == spelled
        assert argv[-1] == str(ctx) and argv[argv.index("-f") + 1] == str(ctx / "Dockerfile")
        assert argv[argv.index("--iidfile") + 1] == str(inv.scratch / "iid") == str(inv.command.writes)
        assert f"id={SECRET_UV},src={inv.scratch / 'secrets' / 'uv.toml'}" in argv
        assert f"id={SECRET_CA},src={ca}" in argv
        assert argv[argv.index("--target") + 1] == "runtime"
        assert (inv.command.env == {"DOCKER_BUILDKIT": "1"}) == (engine_name == "docker-classic")


def test_a_local_index_folder_means_host_networking_and_no_sources_no_secrets(tmp_path: Path) -> None:
    plan, spec_dir = _plan(CPU)
    engine = ENGINES["docker-buildx"]
    options = BuildOptions(context_dir=tmp_path / "ctx")
    bare = plan_build(plan, spec_dir, options, engine, Sources(), cwd=tmp_path)
    assert bare.secrets == {} and bare.network == "default" and "--secret" not in bare.command.argv
    local = plan_build(plan, spec_dir, options, engine, Sources(index_url=str(tmp_path)), cwd=tmp_path)
    assert local.network == "host" and local.command.argv[local.command.argv.index("--network") + 1] == "host"


def test_what_cannot_be_built_is_refused_while_planning(tmp_path: Path) -> None:
    plan, spec_dir = _plan(CPU)
    with pytest.raises(InputError, match="no image store to push"):
        plan_build(plan, spec_dir, BuildOptions(push=True), ENGINES["apptainer"], Sources(), cwd=tmp_path)
    with pytest.raises(InputError, match="no 'dev' target"):
        plan_build(plan, spec_dir, BuildOptions(target="dev"), ENGINES["apptainer"], Sources(), cwd=tmp_path)
    with pytest.raises(InputError, match="unknown target"):
        plan_build(plan, spec_dir, BuildOptions(target="x"), ENGINES["podman"], Sources(), cwd=tmp_path)


# -- execute with a fake engine ---------------------------------------------------------------------------


@dataclass
class FakeEngine:
    """An engine that builds nothing: it records each call and writes the image id where asked."""

    info: EngineInfo
    fail: bool = False
    runner: Runner = field(default_factory=Runner)
    calls: list[tuple[str, object]] = field(default_factory=list)
    seen_secrets: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.info.name

    def run_build(self, command: BuildCommand, *, secrets: Mapping[str, Path] | None = None,
                  labels: Mapping[str, str] | None = None,
                  progress: Callable[[BuildEvent], None] | None = None) -> BuildOutcome:
        self.calls.append(("build", command))
        for sid, path in (secrets or {}).items():  # what the engine finds while it runs
            self.seen_secrets[sid] = (path.read_text(), stat.S_IMODE(path.stat().st_mode))
        if self.fail:
            raise BuildError("fake build failed.")
        command.writes.write_text("sha256:f00d\n")
        step = StepRecord("#1", "runtime", "RUN true", "done", 1.0)
        return BuildOutcome("sha256:f00d", 2.0, (step,))

    def image_exists(self, image: str) -> bool:
        self.calls.append(("exists", image))
        return True

    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool:
        raise AssertionError("the base exists: nothing to pull")

    def inspect_image(self, image: str) -> ImageDetails:
        self.calls.append(("inspect", image))
        return ImageDetails("sha256:f00d", 1234, 3, "1000:1000", (), {}, "")

    def tag(self, source: str, ref: str) -> None:
        self.calls.append(("tag", (source, ref)))

    def push(self, image: str) -> str:
        self.calls.append(("push", image))
        return ""

    # the rest of an image store: execute never needs them
    def save(self, image: str, dest: Path) -> Path:
        raise AssertionError("execute saves nothing")

    def save_stream(self, image: str) -> object:
        raise AssertionError("execute saves nothing")

    def load(self, archive: Path) -> str:
        raise AssertionError("execute loads nothing")

    def import_tar(self, tarball: Path, ref: str, *, changes: object = ()) -> str:
        raise AssertionError("execute imports nothing")

    def run(self, image: str, argv: object, **kwargs: object) -> Completed:
        self.calls.append(("run", image))  # the SBOM's look into the image's venv
        return Completed(("docker", "run"), 0, '[{"name": "torch", "version": "2.13.0+cpu", "license": "", '
                         '"record_sha256": "' + "e" * 64 + '"}]', "", 0.1)


def _invocation(tmp_path: Path, engine: FakeEngine, engine_name: str = "docker-buildx",
                **options: object) -> BuildInvocation:
    plan, spec_dir = _plan(ROOT / "examples" / "cpu.toml")
    wheels = tmp_path / "wheels"  # a local wheel folder: no index to reach, a uv.toml all the same
    wheels.mkdir(exist_ok=True)
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"")
    sources = Sources(find_links=(str(wheels),))
    return plan_build(plan, spec_dir, BuildOptions(context_dir=tmp_path / "ctx", **options),  # type: ignore[arg-type]
                      ENGINES[engine_name], sources, cwd=tmp_path)


def test_execute_runs_exactly_the_planned_command_then_tags_and_pushes(tmp_path: Path) -> None:
    engine = FakeEngine(ENGINES["docker-buildx"].info)
    inv = _invocation(tmp_path, engine, push=True)
    summary = execute(inv, engine)
    kinds = [k for k, _ in engine.calls]
    assert kinds == ["exists", "inspect", "build", "tag", "inspect", "push", "run"]
    assert engine.calls[2][1] == inv.command  # exactly what --dry-run printed
    assert engine.calls[3][1] == ("sha256:f00d", inv.image) and engine.calls[5][1] == inv.image
    uv_toml, mode = engine.seen_secrets[SECRET_UV]
    assert "/kiln/wheels" in uv_toml and mode == 0o600
    assert not inv.scratch.exists()  # the secrets and the id file are gone
    assert (inv.context / "Dockerfile").is_file() and (inv.context / ".kiln/bin/uv").is_file()
    assert (inv.context / ".kiln/wheels/six-1.16.0-py2.py3-none-any.whl").exists()
    assert summary.image == inv.image and summary.pushed and summary.size_bytes == 1234
    # the SBOM, beside the image in the cache folder, lists what the image's venv holds
    assert summary.sbom is not None and summary.sbom.startswith(str(tmp_path / "cache"))
    sbom = json.loads(Path(summary.sbom).read_text())
    assert sbom["specVersion"] == "1.6" and [c["purl"] for c in sbom["components"]] == ["pkg:pypi/torch@2.13.0%2Bcpu"]


def test_a_failed_build_tags_nothing_and_leaves_no_secrets(tmp_path: Path) -> None:
    engine = FakeEngine(ENGINES["docker-buildx"].info, fail=True)
    inv = _invocation(tmp_path, engine)
    with pytest.raises(BuildError):
        execute(inv, engine)
    assert [k for k, _ in engine.calls] == ["exists", "inspect", "build"]
    assert not inv.scratch.exists() and not os.path.exists(inv.secrets[SECRET_UV])


# -- registry build cache ---------------------------------------------------------------------------

CACHE = "127.0.0.1:5000/kiln-test/example-cpu:buildcache"


def _cache_flags(argv: tuple[str, ...]) -> list[str]:
    """The argv between --iidfile's value and the context folder: where the cache options go."""
    return list(argv[argv.index("--iidfile") + 2:-1])


@pytest.mark.parametrize(("engine_name", "flags", "cache_push"), [
    ("docker-buildx", ["--cache-from", f"type=registry,ref={CACHE}",
                       "--cache-to", f"type=registry,ref={CACHE},mode=max"], None),
    ("docker-classic", ["--cache-from", CACHE, "--build-arg", "BUILDKIT_INLINE_CACHE=1"], CACHE),
    ("podman", ["--cache-from", "127.0.0.1:5000/kiln-test/example-cpu",
                "--cache-to", "127.0.0.1:5000/kiln-test/example-cpu"], None),
])
def test_cache_options_in_each_engines_spelling(tmp_path: Path, engine_name: str, flags: list[str],
                                                cache_push: str | None) -> None:
    plan, spec_dir = _plan(ROOT / "examples" / "cpu.toml")
    options = BuildOptions(context_dir=tmp_path / "ctx", cache_from=(CACHE,), cache_to=CACHE)
    inv = plan_build(plan, spec_dir, options, ENGINES[engine_name], Sources(), cwd=tmp_path)
    assert _cache_flags(inv.command.argv) == flags
    assert inv.cache_push == cache_push and inv.cache_to == CACHE and inv.cache_from == (CACHE,)
    shown = inv.to_dict()
    assert shown["cache_to"] == CACHE and shown["cache_from"] == [CACHE] and shown["cache_push"] == cache_push
    plain = plan_build(plan, spec_dir, BuildOptions(context_dir=tmp_path / "ctx"), ENGINES[engine_name],
                       Sources(), cwd=tmp_path)
    assert _cache_flags(plain.command.argv) == [] and plain.cache_push is None


def test_bad_cache_references_and_apptainer_are_refused_while_planning(tmp_path: Path) -> None:
    plan, spec_dir = _plan(ROOT / "examples" / "cpu.toml")
    for bad in ("http://127.0.0.1:5000/cache", "Reg/Upper", "a b", ""):
        with pytest.raises(InputError, match="not an image reference") as info:
            plan_build(plan, spec_dir, BuildOptions(cache_to=bad), ENGINES["docker-classic"], Sources(), cwd=tmp_path)
        assert "--cache-to" in info.value.message
    with pytest.raises(InputError, match="--cache-from"):
        plan_build(plan, spec_dir, BuildOptions(cache_from=("x//y",)), ENGINES["podman"], Sources(), cwd=tmp_path)
    with pytest.raises(InputError, match="apptainer keeps no build cache"):
        plan_build(plan, spec_dir, BuildOptions(cache_to=CACHE), ENGINES["apptainer"], Sources(), cwd=tmp_path)


def test_the_classic_builders_inline_cache_is_pushed_after_the_build(tmp_path: Path) -> None:
    engine = FakeEngine(ENGINES["docker-classic"].info)
    inv = _invocation(tmp_path, engine, "docker-classic", cache_to=CACHE)
    summary = execute(inv, engine)
    assert engine.calls[-3:-1] == [("tag", ("sha256:f00d", CACHE)), ("push", CACHE)]
    assert summary.cache_to == CACHE and summary.to_dict()["cache_to"] == CACHE
    # pushing the image itself to the cache reference: one push, not two
    engine = FakeEngine(ENGINES["docker-classic"].info)
    inv = _invocation(tmp_path, engine, "docker-classic", cache_to=CACHE, tag=CACHE, push=True)
    execute(inv, engine)
    assert [c for c in engine.calls if c[0] == "push"] == [("push", CACHE)]
    # buildx exports during the build: nothing to push afterwards
    engine = FakeEngine(ENGINES["docker-buildx"].info)
    execute(_invocation(tmp_path, engine, cache_to=CACHE), engine)
    assert [c for c in engine.calls if c[0] == "push"] == []


def test_a_locked_digest_that_is_gone_is_a_lock_error(tmp_path: Path) -> None:
    from torchkiln.errors import ExitCode, LockError

    @dataclass
    class Gone(FakeEngine):
        def image_exists(self, image: str) -> bool:
            self.calls.append(("exists", image))
            return False

        def pull(self, image: str, *, timeout: float | None = 120) -> bool:
            self.calls.append(("pull", image))
            return False

    engine = Gone(ENGINES["docker-classic"].info)
    inv = dataclasses.replace(_invocation(tmp_path, engine, "docker-classic"),
                              base_image="127.0.0.1:5000/kiln-test/base@sha256:" + "0" * 64, lock="/x/cpu.lock")
    with pytest.raises(LockError, match="pinned by /x/cpu.lock is neither") as info:
        execute(inv, engine)
    assert info.value.exit_code == ExitCode.LOCK and "--upgrade" in info.value.hint
    assert [k for k, _ in engine.calls] == ["exists", "pull"]  # nothing built
