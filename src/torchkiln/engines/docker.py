"""Docker with BuildKit, the docker flavour of ``OciEngine``: ``docker buildx build`` where the buildx
plugin works, else the classic client (Docker < 23) with ``DOCKER_BUILDKIT=1``.

Detection probes every ``docker`` executable on PATH in order (or the one named by
``KILN_DOCKER``): a client of Docker 23 or newer without buildx cannot use BuildKit at all, so a
plain ``which docker`` is not enough — an older client further down PATH may be the usable one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from torchkiln.engines.engine import BuildRequest, EngineInfo
from torchkiln.engines.oci import OciEngine, OciFlavour, Probe, common_build_flags, parse_version
from torchkiln.engines.progress import BuildKitProgress
from torchkiln.runner import Runner

#: the oldest daemon whose built-in Dockerfile frontend accepts RUN --mount without a
#: ``# syntax=`` line (a syntax line would make BuildKit pull a frontend image: impossible offline)
MIN_SERVER = Version("20.10")
#: from Docker 23 the classic client needs the buildx plugin for BuildKit
CLASSIC_MAX_CLIENT = Version("23")

INSTALL_HINT = (
    "Install Docker Engine with BuildKit — Debian/Ubuntu: `apt-get install docker.io` (add "
    "`docker-buildx` for Docker 23 and newer) and start the daemon — or podman 4 or newer "
    "(`apt-get install podman`), then select it with --engine podman."
)


def spell_build(request: BuildRequest, info: EngineInfo) -> tuple[list[str], dict[str, str]]:
    """``docker buildx build --load`` where buildx works, else the classic client with ``DOCKER_BUILDKIT=1``;
    BuildKit's plain progress either way (``BuildKitProgress`` reads it)."""
    env: dict[str, str] = {}
    if info.builder == "buildx":
        cmd = [info.binary, "buildx", "build", "--load"]
    else:
        cmd = [info.binary, "build"]
        env["DOCKER_BUILDKIT"] = "1"
    cache = cache_flags(info, request.cache_from, request.cache_to)
    return [*cmd, "--progress", "plain", *common_build_flags(request, cache)], env


def cache_flags(info: EngineInfo, cache_from: Sequence[str], cache_to: str | None) -> list[str]:
    """Registry build cache: buildx exports every stage's steps (``mode=max``) to a cache
    manifest of its own; the classic builder can only write the cache metadata into the image
    itself (``BUILDKIT_INLINE_CACHE``: the final stage's steps), which is then pushed as
    ``cache_to`` after the build, and reads it back with a plain ``--cache-from REF``."""
    flags: list[str] = []
    if info.builder == "buildx":
        for ref in cache_from:
            flags += ["--cache-from", f"type=registry,ref={ref}"]
        if cache_to:
            flags += ["--cache-to", f"type=registry,ref={cache_to},mode=max"]
        return flags
    for ref in cache_from:
        flags += ["--cache-from", ref]
    if cache_to:
        flags += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    return flags


def docker_candidates(env: Mapping[str, str] | None = None) -> list[str]:
    """Every distinct ``docker`` executable on PATH, in PATH order; ``KILN_DOCKER`` alone if set."""
    env = os.environ if env is None else env
    explicit = env.get("KILN_DOCKER")
    if explicit:
        return [explicit]
    seen: set[str] = set()
    found: list[str] = []
    for d in env.get("PATH", "").split(os.pathsep):
        if not d:
            continue
        p = Path(d) / "docker"
        if p.is_file() and os.access(p, os.X_OK):
            real = str(p.resolve())
            if real not in seen:
                seen.add(real)
                found.append(str(p))
    return found


def daemon_problem(output: str) -> tuple[str, str]:
    """Turn a failed ``docker version`` into (reason, hint)."""
    low = output.lower()
    if "permission denied" in low:
        return (
            "permission denied on the Docker daemon's socket",
            "Add your user to the `docker` group (`sudo usermod -aG docker $USER`, then log in again) or use podman.",
        )
    if "cannot connect" in low or "is the docker daemon running" in low or "no such file" in low:
        return (
            "the Docker daemon is not running",
            "Start it: `sudo systemctl start docker` (or run `dockerd` in the background where there is no "
            "systemd), or use podman with --engine podman.",
        )
    last = output.strip().splitlines()[-1] if output.strip() else "no output"
    return (f"the Docker daemon did not answer ({last})", "Check the daemon's log and DOCKER_HOST.")


def probe_docker(binary: str, runner: Runner) -> Probe:
    """Can ``binary`` build with BuildKit against a running daemon of a supported version?"""
    ver = runner.run([binary, "--version"], check=False)
    if ver.returncode != 0:
        return Probe(binary, None, f"`{binary} --version` failed", INSTALL_HINT)
    client = parse_version(ver.stdout)
    bx = runner.run([binary, "buildx", "version"], check=False)
    if bx.returncode == 0:
        builder = "buildx"
    elif client is not None and client < CLASSIC_MAX_CLIENT:
        builder = "buildkit"
    else:
        return Probe(
            binary,
            None,
            f"Docker client {client} at {binary} has no working buildx plugin, and clients from Docker 23 "
            "on cannot use BuildKit without it",
            "Install the buildx plugin (Debian/Ubuntu: `apt-get install docker-buildx`), or put a client that "
            "has it first on PATH, or name one with KILN_DOCKER=/path/to/docker.",
        )
    srv = runner.run([binary, "version", "--format", "{{.Server.Version}}"], check=False)
    if srv.returncode != 0 or not srv.stdout.strip():
        reason, hint = daemon_problem(srv.output)
        return Probe(binary, None, reason, hint)
    server = parse_version(srv.stdout)
    if server is None or server < MIN_SERVER:
        return Probe(
            binary,
            None,
            f"Docker daemon {srv.stdout.strip()} is older than {MIN_SERVER}",
            f"Upgrade Docker Engine to {MIN_SERVER} or newer (its built-in Dockerfile frontend supports RUN --mount).",
        )
    info = EngineInfo("docker", binary, str(client or "?"), srv.stdout.strip(), builder)
    return Probe(binary, DockerEngine(info, runner))


DOCKER = OciFlavour(
    name="docker",
    spell_build=spell_build,
    progress=BuildKitProgress,
    gpu_flags=("--gpus", "all"),
    save_flags=(),
    candidates=docker_candidates,
    probe=probe_docker,
    install_hint=INSTALL_HINT,
)


class DockerEngine(OciEngine):
    """``OciEngine`` with the docker flavour."""

    def __init__(self, info: EngineInfo, runner: Runner) -> None:
        super().__init__(DOCKER, info, runner)
