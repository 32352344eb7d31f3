"""podman (buildah inside): the same Dockerfile, secrets and cache mounts, no daemon."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from packaging.version import Version

from torchkiln.engines.base import BuildOutcome, Engine, EngineInfo, EngineName, ProgressCallback, build_failure
from torchkiln.engines.docker import Probe, _version
from torchkiln.engines.progress import PodmanProgress
from torchkiln.runner import Runner

#: RUN --mount=type=secret|cache|bind and build --secret work from podman 4
MIN_VERSION = Version("4.0")

INSTALL_HINT = "Install podman 4 or newer (Debian/Ubuntu: `apt-get install podman`), or use docker."


class PodmanEngine(Engine):
    name: EngineName = "podman"

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
    ) -> tuple[list[str], dict[str, str]]:
        cmd = [self.info.binary, "build", "--layers", "-f", str(dockerfile)]
        if target:
            cmd += ["--target", target]
        for sid, path in sorted((secrets or {}).items()):
            cmd += ["--secret", f"id={sid},src={path}"]
        if network and network != "default":
            cmd += ["--network", network]
        for k, v in sorted((labels or {}).items()):
            cmd += ["--label", f"{k}={v}"]
        if no_cache:
            cmd.append("--no-cache")
        if iidfile is not None:
            cmd += ["--iidfile", str(iidfile)]
        cmd.append(str(context))
        return cmd, {}

    def build(
        self,
        context: Path,
        dockerfile: Path,
        *,
        target: str | None = None,
        secrets: Mapping[str, Path] | None = None,
        network: str | None = None,
        labels: Mapping[str, str] | None = None,
        no_cache: bool = False,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome:
        parser = PodmanProgress(progress)
        with tempfile.TemporaryDirectory(prefix="kiln-iid-") as tmp:
            iid = Path(tmp) / "iid"
            cmd, env = self.build_command(
                context, dockerfile, target=target, secrets=secrets, network=network,
                labels=labels, no_cache=no_cache, iidfile=iid,
            )
            result = self.runner.run(cmd, env=env, on_line=parser.feed, check=False, what="podman build")
            parser.finish(result.returncode == 0)
            if result.returncode != 0:
                raise build_failure("podman", parser.failed, result)
            image_id = iid.read_text().strip() if iid.exists() else ""
        return BuildOutcome(image_id=image_id, seconds=result.seconds, steps=parser.steps)

    def _gpu_flags(self) -> list[str]:
        # the Container Device Interface name that nvidia-ctk generates
        return ["--device", "nvidia.com/gpu=all"]

    def _save_command(self, image: str, dest: Path) -> list[str]:
        return [self.info.binary, "save", "--format", "docker-archive", "-o", str(dest), image]


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
