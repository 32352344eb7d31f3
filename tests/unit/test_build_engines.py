"""Engine detection and command lines, without needing a working engine.

Fake engines are small shell scripts on a private PATH: they answer the probes the way real
clients do in each situation (a newer client without buildx, a daemon that is down, …).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchkiln.engines import Engine, ImageStore, OciEngine, get_engine, probe_engines, require_store
from torchkiln.engines.docker import DockerEngine, daemon_problem, docker_candidates
from torchkiln.engines.engine import BuildRequest, EngineInfo, Mount, RunRequest, StepRecord, classify_build_failure
from torchkiln.engines.podman import PodmanEngine, needs_explicit_ulimits
from torchkiln.errors import BuildError, EngineMissingError, InputError, SourceError
from torchkiln.runner import Completed, Runner

ROOT = Path(__file__).resolve().parents[2]


def fake_docker(folder: Path, *, client: str, buildx: bool, server: str | None, error: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "docker"
    server_branch = f'echo "{server}"; exit 0' if server else f'echo "{error}" >&2; exit 1'
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "Docker version {client}, build abc"; exit 0; fi\n'
        f'if [ "$1" = "buildx" ]; then {"echo buildx v0.12; exit 0" if buildx else "echo unknown >&2; exit 1"}; fi\n'
        f'if [ "$1" = "version" ]; then {server_branch}; fi\n'
        "exit 2\n"
    )
    script.chmod(0o755)
    return script


def test_newer_client_without_buildx_is_skipped_for_an_older_one(tmp_path: Path) -> None:
    new = fake_docker(tmp_path / "new", client="28.2.2", buildx=False, server="28.2.2")
    old = fake_docker(tmp_path / "old", client="20.10.24+dfsg1", buildx=False, server="20.10.24+dfsg1")
    env = {"PATH": f"{new.parent}{os.pathsep}{old.parent}"}
    assert docker_candidates(env) == [str(new), str(old)]
    probes = probe_engines("docker", Runner(), env)
    assert probes[0].engine is None and "buildx" in probes[0].reason
    engine = probes[1].engine
    assert isinstance(engine, DockerEngine)
    assert engine.info.builder == "buildkit" and engine.info.binary == str(old)


def test_buildx_is_preferred_when_it_works(tmp_path: Path) -> None:
    d = fake_docker(tmp_path / "bx", client="27.0.1", buildx=True, server="27.0.1")
    engine = get_engine("docker", Runner(), {"PATH": str(d.parent)})
    assert engine.info.builder == "buildx"
    command = engine.build_command(BuildRequest(Path("/ctx"), Path("/ctx/Dockerfile"), Path("/t/iid"),
                                                target="runtime"))
    assert command.argv[:4] == (str(d), "buildx", "build", "--load")
    assert command.env == {} and command.cwd is None and command.writes == Path("/t/iid")


def test_daemon_down_says_start_it(tmp_path: Path) -> None:
    msg = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    d = fake_docker(tmp_path / "down", client="20.10.24", buildx=False, server=None, error=msg)
    with pytest.raises(EngineMissingError) as info:
        get_engine("docker", Runner(), {"PATH": str(d.parent)})
    assert "not running" in info.value.message
    assert info.value.hint is not None and "dockerd" in info.value.hint


def test_old_daemon_is_refused(tmp_path: Path) -> None:
    d = fake_docker(tmp_path / "old", client="19.03.15", buildx=False, server="19.03.15")
    with pytest.raises(EngineMissingError, match="older than 20.10"):
        get_engine("docker", Runner(), {"PATH": str(d.parent)})


def test_nothing_installed_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(EngineMissingError) as info:
        get_engine(None, Runner(), {"PATH": str(tmp_path)})
    assert "docker is not installed" in info.value.message and "podman is not installed" in info.value.message
    assert info.value.hint is not None
    assert "apt-get install docker.io" in info.value.hint and "podman" in info.value.hint
    assert info.value.hint.count("apt-get install podman") == 1


def test_unknown_engine_name() -> None:
    with pytest.raises(EngineMissingError, match="unknown engine"):
        get_engine("containerd", Runner(), {"PATH": ""})


def test_daemon_problem_permission() -> None:
    reason, hint = daemon_problem("Got permission denied while trying to connect to the Docker daemon socket")
    assert "permission" in reason and "docker` group" in hint


def test_docker_classic_build_command() -> None:
    info = EngineInfo("docker", "/x/docker", "20.10.24", "20.10.24", "buildkit")
    engine = DockerEngine(info, Runner())
    command = engine.build_command(BuildRequest(
        Path("/ctx"), Path("/ctx/Dockerfile"), Path("/t/iid"), target="dev",
        secrets={"kiln-uv": Path("/s/uv.toml"), "kiln-ca": Path("/s/ca.pem")}, network="host",
        labels={"a": "b"}, no_cache=True,
    ))
    assert command.env == {"DOCKER_BUILDKIT": "1"}
    assert list(command.argv) == [
        "/x/docker", "build", "--progress", "plain", "-f", "/ctx/Dockerfile", "--target", "dev",
        "--secret", "id=kiln-ca,src=/s/ca.pem", "--secret", "id=kiln-uv,src=/s/uv.toml",
        "--network", "host", "--label", "a=b", "--no-cache", "--iidfile", "/t/iid", "/ctx",
    ]


def test_podman_build_command_and_gpu_flags() -> None:
    engine = PodmanEngine(EngineInfo("podman", "/x/podman", "4.3.1", "4.3.1", "buildah"), Runner())
    command = engine.build_command(BuildRequest(Path("/ctx"), Path("/ctx/Dockerfile"), Path("/t/iid"),
                                                network="default"))
    assert list(command.argv) == ["/x/podman", "build", "--layers", "-f", "/ctx/Dockerfile", "--iidfile", "/t/iid",
                                  "/ctx"]
    assert engine.flavour.gpu_flags == ("--device", "nvidia.com/gpu=all")
    assert engine.flavour.save_flags == ("--format", "docker-archive")


def test_run_is_spelled_once_per_engine_from_a_run_request(tmp_path: Path) -> None:
    """``Engine.run`` (shared by every engine) turns its options into a ``RunRequest``; each engine
    spells only ``run_command``, and ``run`` runs exactly that command."""
    echo = tmp_path / "docker"
    echo.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    echo.chmod(0o755)
    docker = DockerEngine(EngineInfo("docker", str(echo), "27.3.1", "27.3.1", "buildx"), Runner())
    request = RunRequest("img:1", ("python", "-V"), gpus=True, mounts=(Mount(Path("/in"), "/in"),),
                         env={"A": "b"}, user="0", workdir="/w", network="none", entrypoint="", interactive=True)
    assert docker.run_command(request) == [
        str(echo), "run", "--rm", "-i", "--gpus", "all", "-v", "/in:/in:ro", "-e", "A=b", "--user", "0",
        "--workdir", "/w", "--network", "none", "--entrypoint", "", "img:1", "python", "-V",
    ]
    ran = docker.run("img:1", ["python", "-V"], gpus=True, mounts=[Mount(Path("/in"), "/in")], env={"A": "b"},
                     user="0", workdir="/w", network="none", entrypoint="", interactive=True)
    assert ran.stdout.splitlines() == docker.run_command(request)[1:]
    assert docker.run_request(request).stdout == ran.stdout
    podman = PodmanEngine(EngineInfo("podman", "/x/podman", "4.3.1", "4.3.1", "buildah"), Runner())
    spelled = podman.run_command(RunRequest("img", ("id",), gpus=True))
    assert spelled[:3] == ["/x/podman", "run", "--rm"]
    assert spelled[-4:] == ["--device", "nvidia.com/gpu=all", "img", "id"]
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    broken = DockerEngine(EngineInfo("docker", str(failing), "27.3.1", "27.3.1", "buildx"), Runner())
    assert broken.run("img:1", check=False).returncode == 3
    with pytest.raises(BuildError, match="docker run img:1"):
        broken.run("img:1")


def test_podman_ulimits_probe(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001fffeffffff\n")  # CAP_SYS_RESOURCE (bit 24) dropped
    assert needs_explicit_ulimits(status) is (os.geteuid() == 0)
    status.write_text("Name:\tx\nCapEff:\t000001ffffffffff\n")
    assert needs_explicit_ulimits(status) is False


def _result(out: str) -> Completed:
    return Completed(("docker", "build"), 1, out, "", 1.0)


def test_failure_classification() -> None:
    base_missing = StepRecord("#3", "internal", "load metadata for docker.io/library/python:3.11-slim-bookworm")
    base_missing.log.append("failed to resolve source metadata for docker.io/library/python:3.11-slim-bookworm")
    err = classify_build_failure(base_missing, "", base_image="python:3.11-slim-bookworm")
    assert isinstance(err, InputError) and err.hint is not None and "kiln base bootstrap" in err.hint

    step = StepRecord("#7", "torch", "RUN --mount=type=secret,id=kiln-uv . /kiln/sources.sh && uv pip install torch")
    step.log += ["error: Failed to fetch: `http://127.0.0.1:4000/simple/torch/`", "  Caused by: Connection refused"]
    err = classify_build_failure(step, "")
    assert isinstance(err, SourceError) and "stage 'torch'" in err.message
    assert "[" not in err.message  # the CLI prints messages as rich markup
    assert err.details is not None and "Connection refused" in err.details

    step = StepRecord("#8", "packages", "RUN uv pip install nope")
    step.log += ["error: No solution found when resolving dependencies"]
    assert classify_build_failure(step, "") is None


def test_build_failure_error_is_a_build_error() -> None:
    from torchkiln.engines.engine import build_failure

    step = StepRecord("#8", "packages", "RUN --mount=type=cache,target=/root/.cache/uv uv pip install nope")
    step.log += ["Resolved 3 packages", "error: No solution found"]
    err = build_failure("docker", step, _result("error: failed to solve: exit code: 1\n"))
    assert isinstance(err, BuildError)
    assert err.message == "docker build failed at stage 'packages', step RUN uv pip install nope."
    assert err.details is not None
    assert err.details.splitlines() == [
        "failing stage 'packages', step RUN uv pip install nope:",
        "  Resolved 3 packages",
        "  error: No solution found",
        "error: failed to solve: exit code: 1",
    ]


def test_cli_without_engine_exits_5_with_a_clear_message(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "KILN_ENGINE": ""}
    env.pop("KILN_DOCKER", None)
    r = subprocess.run(
        [sys.executable, "-m", "torchkiln", "build", str(ROOT / "examples" / "cpu.toml")],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 5, r.stderr
    assert "no usable container engine" in r.stderr
    assert "apt-get install docker.io" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("log", "kind_words", "hint_words"),
    [
        ("oom-cc1plus-memory-700m.log", "memory", "MAX_JOBS"),
        ("isolation-uv-buildkit.log", "No module named 'torch'", "no-build-isolation"),
        ("arch-compute70-cuda13.log", "architecture", "TORCH_CUDA_ARCH_LIST"),
    ],
)
def test_build_failure_diagnoses_real_extension_logs(log: str, kind_words: str, hint_words: str) -> None:
    """A failed build's error names the recognised cause and its fix, with the failing lines."""
    from torchkiln.engines.engine import build_failure

    text = (ROOT / "tests" / "fixtures" / "buildlogs" / log).read_text()
    step = StepRecord("#12", "extensions", "RUN kiln_wheel my_op")
    err = build_failure("docker", step, _result(text))
    assert isinstance(err, BuildError)
    assert kind_words.lower() in (err.message + (err.details or "")).lower()
    assert err.hint is not None and hint_words in (err.hint + (err.details or ""))
    assert err.details is not None and "fix:" in err.details


def test_docker_and_podman_are_one_oci_engine_with_a_store(tmp_path: Path) -> None:
    """One implementation, two flavours; both have the image store that apptainer lacks."""
    docker = DockerEngine(EngineInfo("docker", "/x/docker", "27.3.1", "27.3.1", "buildx"), Runner())
    podman = PodmanEngine(EngineInfo("podman", "/x/podman", "4.3.1", "4.3.1", "buildah"), Runner())
    for engine in (docker, podman):
        assert type(engine).run is OciEngine.run and type(engine).build_command is OciEngine.build_command
        assert isinstance(engine, Engine) and isinstance(engine, ImageStore)
        assert require_store(engine, "tag", "-") is engine
    assert (docker.name, podman.name) == ("docker", "podman") and docker.flavour.gpu_flags == ("--gpus", "all")


def test_load_returns_the_image_the_archive_named(tmp_path: Path) -> None:
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "load -i" ] && echo "Loaded image: kiln-test/x:1" && exit 0\nexit 3\n')
    fake.chmod(0o755)
    engine = DockerEngine(EngineInfo("docker", str(fake), "27.3.1", "27.3.1", "buildx"), Runner())
    assert engine.load(tmp_path / "x.tar") == "kiln-test/x:1"


def test_engines_import_nothing_of_the_stages_before_them() -> None:
    """Engines run commands: they read no spec, plan or renderer (docs/architecture.md)."""
    import ast

    earlier = ("torchkiln.render", "torchkiln.building", "torchkiln.resolve", "torchkiln.spec", "torchkiln.plan",
               "torchkiln.load", "torchkiln.knowledge", "torchkiln.cli")
    for path in sorted((ROOT / "src" / "torchkiln" / "engines").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.startswith(earlier)]
            assert not bad, f"{path.name} imports {bad}"
