"""podman (buildah inside), the podman flavour of ``OciEngine``: the same Dockerfile, secrets and cache
mounts as docker, no daemon."""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Mapping
from pathlib import Path

from packaging.version import Version

from torchkiln.engines.engine import BuildRequest, EngineInfo, repository_of
from torchkiln.engines.oci import OciEngine, OciFlavour, Probe, common_build_flags, parse_version
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


def explicit_ulimits() -> list[str]:
    """``--ulimit`` flags for every ``run`` where podman's defaults cannot be applied
    (see ``needs_explicit_ulimits``)."""
    flags: list[str] = []
    for name, (soft, hard) in (_safe_ulimits() if needs_explicit_ulimits() else {}).items():
        flags += ["--ulimit", f"{name}={soft}:{hard}"]
    return flags


def spell_build(request: BuildRequest, info: EngineInfo) -> tuple[list[str], dict[str, str]]:
    """``podman build --layers`` (buildah caches steps only with it); ``PodmanProgress`` reads its output.

    buildah stores each cached step as an image in a repository (tagged by its cache key), so its
    ``--cache-from``/``--cache-to`` take a repository: a tag given in the reference is dropped.
    """
    cache: list[str] = []
    for ref in request.cache_from:
        cache += ["--cache-from", repository_of(ref)]
    if request.cache_to:
        cache += ["--cache-to", repository_of(request.cache_to)]
    return [info.binary, "build", "--layers", *common_build_flags(request, cache)], {}


def podman_candidates(env: Mapping[str, str]) -> list[str]:
    """``KILN_PODMAN``, else the ``podman`` on PATH (none: an empty list)."""
    path = env.get("KILN_PODMAN") or shutil.which("podman", path=env.get("PATH", ""))
    return [path] if path else []


def probe_podman(path: str, runner: Runner) -> Probe:
    """Can the podman at ``path`` build (version 4 or newer, its storage opens)?"""
    ver = runner.run([path, "version", "--format", "{{.Client.Version}}"], check=False)
    if ver.returncode != 0:
        return Probe(path, None, f"`podman version` failed: {ver.tail(3)}", INSTALL_HINT)
    version = parse_version(ver.stdout)
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


PODMAN = OciFlavour(
    name="podman",
    spell_build=spell_build,
    progress=PodmanProgress,
    # the Container Device Interface name that nvidia-ctk generates
    gpu_flags=("--device", "nvidia.com/gpu=all"),
    save_flags=("--format", "docker-archive"),
    candidates=podman_candidates,
    probe=probe_podman,
    install_hint=INSTALL_HINT,
    run_flags=explicit_ulimits,
)


class PodmanEngine(OciEngine):
    """``OciEngine`` with the podman flavour."""

    def __init__(self, info: EngineInfo, runner: Runner) -> None:
        super().__init__(PODMAN, info, runner)
