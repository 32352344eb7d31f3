"""podman (buildah inside): the same Dockerfile, secrets and cache mounts, no daemon."""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from torchkiln.engines.engine import Engine, EngineInfo, EngineName, ProgressCallback, build_flags, repository_of
from torchkiln.engines.docker import Probe, _version
from torchkiln.engines.progress import PodmanProgress
from torchkiln.runner import Runner

#: RUN --mount=type=secret|cache|bind and build --secret work from podman 4
MIN_VERSION = Version("4.0")

INSTALL_HINT = "Install podman 4 or newer (Debian/Ubuntu: `apt-get install podman`), or use docker."


CAP_SYS_RESOURCE = 24


def needs_explicit_ulimits(status: Path = Path("/proc/self/status")) -> bool:
    """Rootful podman without CAP_SYS_RESOURCE cannot start containers with its default ulimits.

    Rootful podman asks the OCI runtime for RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 unless told
    otherwise; raising a hard limit needs CAP_SYS_RESOURCE, which some VMs and nested containers
    drop, and then every ``podman run`` fails with "error setting rlimit type 7: operation not
    permitted" (containers/podman#7510, #17358). ``podman build`` is not affected.
    """
    if os.geteuid() != 0:
        return False  # rootless podman already uses the caller's limits
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return not (int(line.split()[1], 16) >> CAP_SYS_RESOURCE) & 1
    except (OSError, ValueError, IndexError):
        return False
    return False


def _safe_ulimits() -> dict[str, tuple[int, int]]:
    """This process's own NOFILE limits, and NPROC no larger than ``kernel.pid_max`` (the value the
    runtime's init inherits where we measured it)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    cap = [pid_max if v == resource.RLIM_INFINITY else min(v, pid_max) for v in nproc]
    files = [1048576 if v == resource.RLIM_INFINITY else v for v in nofile]
    return {"nofile": (files[0], files[1]), "nproc": (cap[0], cap[1])}


class PodmanEngine(Engine):
    name: EngineName = "podman"

    def __init__(self, info: EngineInfo, runner: Runner) -> None:
        super().__init__(info, runner)
        self._ulimits: dict[str, tuple[int, int]] | None = None

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
        cmd = [self.info.binary, "build", "--layers", "-f", str(dockerfile)]
        # buildah stores each cached step as an image in a repository (tagged by its cache key), so
        # its --cache-from/--cache-to take a repository: a tag given in REF is dropped
        cache: list[str] = []
        for ref in cache_from:
            cache += ["--cache-from", repository_of(ref)]
        if cache_to:
            cache += ["--cache-to", repository_of(cache_to)]
        cmd += build_flags(context, target=target, secrets=secrets, network=network, labels=labels,
                           no_cache=no_cache, iidfile=iidfile, platform=platform, cache=cache)
        return cmd, {}

    def _progress_parser(self, progress: ProgressCallback | None) -> PodmanProgress:
        return PodmanProgress(progress)

    def _run_flags(self) -> list[str]:
        """Explicit ulimits where podman's defaults cannot be applied (see ``needs_explicit_ulimits``)."""
        if self._ulimits is None:
            self._ulimits = _safe_ulimits() if needs_explicit_ulimits() else {}
        flags: list[str] = []
        for name, (soft, hard) in self._ulimits.items():
            flags += ["--ulimit", f"{name}={soft}:{hard}"]
        return flags

    def _gpu_flags(self) -> list[str]:
        # the Container Device Interface name that nvidia-ctk generates
        return ["--device", "nvidia.com/gpu=all"]

    def _save_command(self, image: str, dest: Path | None) -> list[str]:
        out = ["-o", str(dest)] if dest is not None else []
        return [self.info.binary, "save", "--format", "docker-archive", *out, image]


def probe_podman(runner: Runner, binary: str | None = None, search_path: str | None = None) -> Probe:
    path = binary or shutil.which("podman", path=search_path)
    if path is None:
        return Probe("podman", None, "podman is not installed", INSTALL_HINT)
    ver = runner.run([path, "version", "--format", "{{.Client.Version}}"], check=False)
    if ver.returncode != 0:
        return Probe(path, None, f"`podman version` failed: {ver.tail(3)}", INSTALL_HINT)
    version = _version(ver.stdout)
    if version is None or version < MIN_VERSION:
        return Probe(path, None, f"podman {ver.stdout.strip()} is older than {MIN_VERSION}", INSTALL_HINT)
    info = runner.run([path, "info", "--format", "{{.Store.GraphDriverName}}"], check=False)
    if info.returncode != 0:
        return Probe(
            path,
            None,
            f"podman cannot open its storage: {info.tail(3)}",
            "Check `podman info` (rootless podman needs subuid/subgid ranges for your user).",
        )
    v = ver.stdout.strip()
    return Probe(path, PodmanEngine(EngineInfo("podman", path, v, v, "buildah"), runner))
