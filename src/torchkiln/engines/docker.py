"""Docker with BuildKit: ``docker buildx build`` where the buildx plugin works, else the classic
client (Docker < 23) with ``DOCKER_BUILDKIT=1``.

Detection probes every ``docker`` executable on PATH in order (or the one named by
``KILN_DOCKER``): a client of Docker 23 or newer without buildx cannot use BuildKit at all, so a
plain ``which docker`` is not enough — an older client further down PATH may be the usable one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from torchkiln.engines.engine import Engine, EngineInfo, EngineName, ProgressCallback, build_flags
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


class DockerEngine(Engine):
    name: EngineName = "docker"

    def build_command(
        self,
        context: Path,
        dockerfile: Path,
        *,
        target: str | None = None,
        secrets: Mapping[str, Path] | None = None,
        network: str | None = None,
        labels: Mapping[str, str] | None = None,
        no_cache: bool = False,
        iidfile: Path | None = None,
        platform: str | None = None,
        cache_from: Sequence[str] = (),
        cache_to: str | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        env: dict[str, str] = {}
        if self.info.builder == "buildx":
            cmd = [self.info.binary, "buildx", "build", "--load"]
        else:
            cmd = [self.info.binary, "build"]
            env["DOCKER_BUILDKIT"] = "1"
        cmd += ["--progress", "plain", "-f", str(dockerfile)]
        cmd += build_flags(context, target=target, secrets=secrets, network=network, labels=labels,
                           no_cache=no_cache, iidfile=iidfile, platform=platform,
                           cache=self.cache_flags(cache_from, cache_to))
        return cmd, env

    def cache_flags(self, cache_from: Sequence[str], cache_to: str | None) -> list[str]:
        """Registry build cache: buildx exports every stage's steps (``mode=max``) to a cache
        manifest of its own; the classic builder can only write the cache metadata into the image
        itself (``BUILDKIT_INLINE_CACHE``: the final stage's steps), which is then pushed as
        ``cache_to`` after the build, and reads it back with a plain ``--cache-from REF``."""
        flags: list[str] = []
        if self.info.builder == "buildx":
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

    def _progress_parser(self, progress: ProgressCallback | None) -> BuildKitProgress:
        return BuildKitProgress(progress)

    def _gpu_flags(self) -> list[str]:
        return ["--gpus", "all"]

    def _save_command(self, image: str, dest: Path | None) -> list[str]:
        return [self.info.binary, "save", *(["-o", str(dest)] if dest is not None else []), image]


@dataclass(frozen=True)
class Probe:
    """The outcome of probing one candidate binary: an engine, or why it is unusable (and a hint)."""

    binary: str
    engine: Engine | None
    reason: str = ""
    hint: str = ""


def _version(text: str) -> Version | None:
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


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
    client = _version(ver.stdout)
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
    server = _version(srv.stdout)
    if server is None or server < MIN_SERVER:
        return Probe(
            binary,
            None,
            f"Docker daemon {srv.stdout.strip()} is older than {MIN_SERVER}",
            f"Upgrade Docker Engine to {MIN_SERVER} or newer (its built-in Dockerfile frontend supports RUN --mount).",
        )
    info = EngineInfo("docker", binary, str(client or "?"), srv.stdout.strip(), builder)
    return Probe(binary, DockerEngine(info, runner))
