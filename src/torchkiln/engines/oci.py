"""docker and podman: one engine for OCI images in an image store, parametrised by a flavour.

Both CLIs build from a Dockerfile with the same options (``--target``, ``--secret``, ``--label``,
``--iidfile`` …), run containers with the same flags and share ``save``/``tag``/``push``/``import``.
What differs is small and lives in an ``OciFlavour`` (``docker.py``, ``podman.py``): how a build is
spelled (``docker buildx build --load --progress plain`` or classic ``DOCKER_BUILDKIT=1 docker
build``; ``podman build --layers``), which parser reads its output, how GPUs are attached, extra
flags for every ``run``, the ``save`` format, and how a binary is found and probed. The engine
classes ``DockerEngine`` and ``PodmanEngine`` are ``OciEngine`` with their flavour fixed.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from torchkiln.engines.engine import (
    BuildCommand,
    BuildOutcome,
    BuildRequest,
    Engine,
    EngineInfo,
    EngineName,
    ImageDetails,
    ProgressCallback,
    ProgressParser,
    RunRequest,
    build_failure,
    pushed_digest,
    registry_failure,
)
from torchkiln.errors import InputError, disk_full
from torchkiln.runner import ErrorFactory, Runner


@dataclass(frozen=True)
class Probe:
    """The outcome of probing one candidate binary: an engine, or why it is unusable (and a hint)."""

    binary: str
    engine: Engine | None
    reason: str = ""
    hint: str = ""


def parse_version(text: str) -> Version | None:
    """The first ``N.N[.N]`` in an engine's version output."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


def common_build_flags(request: BuildRequest, cache: Sequence[str] = ()) -> list[str]:
    """The ``build`` options docker and podman spell alike, from ``-f``, then ``cache`` (the flavour's own
    spelling of the registry build cache), ending with the context folder."""
    cmd = ["-f", str(request.build_file)]
    if request.platform:
        cmd += ["--platform", request.platform]
    if request.target:
        cmd += ["--target", request.target]
    for sid, path in sorted(request.secrets.items()):
        cmd += ["--secret", f"id={sid},src={path}"]
    if request.network and request.network != "default":
        cmd += ["--network", request.network]
    for k, v in sorted(request.labels.items()):
        cmd += ["--label", f"{k}={v}"]
    if request.no_cache:
        cmd.append("--no-cache")
    cmd += ["--iidfile", str(request.writes), *cache, str(request.context)]
    return cmd


def _no_run_flags() -> list[str]:
    return []


@dataclass(frozen=True)
class OciFlavour:
    """What makes an ``OciEngine`` docker or podman: spellings, the progress parser, detection."""

    name: EngineName
    #: the build's whole command line and extra environment, for this engine's facts
    spell_build: Callable[[BuildRequest, EngineInfo], tuple[list[str], dict[str, str]]]
    #: a parser of this engine's build output
    progress: Callable[[ProgressCallback | None], ProgressParser]
    #: ``run`` flags that attach every GPU
    gpu_flags: tuple[str, ...]
    #: options of ``save`` before ``-o FILE IMAGE`` (the archive must be a docker-archive)
    save_flags: tuple[str, ...]
    #: the binaries to probe, in order of preference, given the environment
    candidates: Callable[[Mapping[str, str]], list[str]]
    #: can this binary build here? (an engine, or why not)
    probe: Callable[[str, Runner], Probe]
    install_hint: str
    #: extra flags for every ``run`` (computed once per engine)
    run_flags: Callable[[], list[str]] = field(default=_no_run_flags)


def _stdin_is_tty() -> bool:
    return sys.stdin.isatty()


class OciEngine(Engine):
    """docker or podman (by ``flavour``): implements ``Engine`` and ``ImageStore`` through the CLI.

    It subclasses the ``Engine`` protocol for its shared ``run``; what is docker's is ``run_command``."""

    def __init__(self, flavour: OciFlavour, info: EngineInfo, runner: Runner) -> None:
        self.flavour = flavour
        self.name: EngineName = flavour.name
        self.info = info
        self.runner = runner
        self._run_flags: list[str] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info!r})"

    # -- building -------------------------------------------------------------------------------------
    def build_command(self, request: BuildRequest) -> BuildCommand:
        """The build, spelled by the flavour: run where the caller is, the image id written to ``request.writes``."""
        argv, env = self.flavour.spell_build(request, self.info)
        return BuildCommand(tuple(argv), env, None, request.writes)

    def run_build(
        self,
        command: BuildCommand,
        *,
        secrets: Mapping[str, Path] | None = None,
        labels: Mapping[str, str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome:
        """Run exactly ``command`` (secrets and labels are in it); the image id is what it wrote to
        ``command.writes``."""
        parser = self.flavour.progress(progress)
        result = self.runner.run(list(command.argv), env=dict(command.env), cwd=command.cwd, on_line=parser.feed,
                                 check=False, what=f"{self.name} build")
        parser.finish(result.returncode == 0)
        if result.returncode != 0:
            raise build_failure(self.name, parser.failed, result)
        image_id = command.writes.read_text().strip() if command.writes.exists() else ""
        return BuildOutcome(image_id=image_id, seconds=result.seconds, steps=parser.steps)

    def build(
        self,
        context: Path,
        dockerfile: Path,
        *,
        target: str | None = None,
        secrets: Mapping[str, Path] | None = None,
        network: str | None = None,
        no_cache: bool = False,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome:
        """Build ``dockerfile`` in ``context``, untagged, for callers with a context of their own
        (benchmarks, tests); ``kiln build`` plans its command first (``torchkiln.building.invocation``)."""
        with tempfile.TemporaryDirectory(prefix="kiln-iid-") as tmp:
            request = BuildRequest(context, dockerfile, Path(tmp) / "iid", target=target, secrets=secrets or {},
                                   network=network, no_cache=no_cache)
            return self.run_build(self.build_command(request), progress=progress)

    # -- running --------------------------------------------------------------------------------------
    def run_command(self, request: RunRequest) -> list[str]:
        """``run --rm`` of ``request`` in a fresh container (removed afterwards); ``run`` is ``Engine``'s."""
        if self._run_flags is None:
            self._run_flags = self.flavour.run_flags()
        cmd = [self.info.binary, "run", "--rm", *self._run_flags]
        if request.interactive:
            cmd.append("-i")
        if request.passthrough and request.interactive and _stdin_is_tty():
            cmd.append("-t")
        if request.gpus:
            cmd += self.flavour.gpu_flags
        for m in request.mounts:
            cmd += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        for k, v in request.env.items():
            cmd += ["-e", f"{k}={v}"]
        for flag, value in (("--user", request.user), ("--workdir", request.workdir), ("--network", request.network),
                            ("--entrypoint", request.entrypoint)):
            if value is not None:
                cmd += [flag, value]
        return [*cmd, request.image, *request.argv]

    # -- images in the store --------------------------------------------------------------------------
    def image_exists(self, image: str) -> bool:
        r = self.runner.run([self.info.binary, "image", "inspect", image], check=False)
        return r.returncode == 0

    def inspect_image(self, image: str) -> ImageDetails:
        r = self.runner.run(
            [self.info.binary, "image", "inspect", image],
            what=f"{self.name} image inspect",
            error=lambda m, h, d: InputError(
                f"image {image!r} does not exist in {self.name}.", h or "Build it first with `kiln build`.", details=d
            ),
        )
        data = json.loads(r.stdout)
        if isinstance(data, list):
            data = data[0]
        return ImageDetails.from_inspect(data)

    def history(self, image: str) -> list[str]:
        """The ``created by`` line of every layer, newest first, untruncated."""
        r = self.runner.run(
            [self.info.binary, "history", "--no-trunc", "--format", "{{.CreatedBy}}", image],
            what=f"{self.name} history",
        )
        return r.stdout.splitlines()

    def remove_image(self, image: str, *, missing_ok: bool = True) -> bool:
        """Remove a tag (or an image id); returns whether something was removed."""
        if missing_ok and not self.image_exists(image):
            return False
        self.runner.run([self.info.binary, "rmi", image], what=f"{self.name} rmi {image}")
        return True

    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool:
        """Try to pull ``image`` (for ``platform``, else the host's); False (never an error) when no
        registry has it."""
        cmd = [self.info.binary, "pull", *(["--platform", platform] if platform else []), image]
        r = self.runner.run(cmd, check=False, timeout=timeout)
        return r.returncode == 0

    # -- the store's own operations (ImageStore) ------------------------------------------------------
    def save(self, image: str, dest: Path) -> Path:
        """Write ``image`` as a docker-archive tar to ``dest``."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.runner.run(self._save_command(image, dest), what=f"{self.name} save {image}",
                        error=self._save_error(image),
                        classify=lambda r: disk_full(r.output, f"$ {r.command}\n{r.tail(10)}"))
        return dest

    @contextmanager
    def save_stream(self, image: str) -> Iterator[int]:
        """``image`` as a docker-archive on a pipe (the engine's ``save`` to stdout): yields its read end."""
        with self.runner.pipe(self._save_command(image, None), what=f"{self.name} save {image}",
                              error=self._save_error(image)) as fd:
            yield fd

    def _save_command(self, image: str, dest: Path | None) -> list[str]:
        """The engine's save of ``image`` as a docker-archive to ``dest`` (to stdout for None)."""
        out = ["-o", str(dest)] if dest is not None else []
        return [self.info.binary, "save", *self.flavour.save_flags, *out, image]

    def _save_error(self, image: str) -> ErrorFactory:
        return lambda m, h, d: InputError(m, h or f"Check that `{image}` exists: `kiln build` it first.", details=d)

    def load(self, archive: Path) -> str:
        """Load a docker-archive (what ``save`` wrote) into the store; returns the image it named ("" if none)."""
        r = self.runner.run(
            [self.info.binary, "load", "-i", str(archive)],
            what=f"{self.name} load {archive}",
            error=lambda m, h, d: InputError(
                m, h or f"Check that {archive} is a whole docker-archive (`{self.name} save` writes one).", details=d
            ),
        )
        loaded = re.findall(r"Loaded image(?: ID)?(?:\(s\))?: *(\S+)", r.stdout)
        return loaded[-1] if loaded else ""

    def tag(self, source: str, ref: str) -> None:
        self.runner.run([self.info.binary, "tag", source, ref], what=f"{self.name} tag")

    def push(self, image: str, compression: str = "gzip", first_run: Path | None = None) -> str:
        """Push ``image`` with the engine's own login; returns the pushed manifest's digest ("" if unknown).

        The registry keeps blobs but no tag from a push that failed part-way, so the tag either
        names the whole image or (as before) nothing new. Credentials are never passed here: the
        engine reads what ``docker login`` / ``podman login`` stored. ``compression`` other than gzip
        (zstd, zstd:chunked) goes through podman (``engines.compress.push_compressed``); estargz through
        ctr-remote and skopeo (``engines.compress.push_converted``), with the files of the ``first_run``
        record (estargz only) placed first in each layer.
        """
        if first_run is not None and compression != "estargz":
            raise InputError("a first-run record is for --compression estargz only.",
                             hint="Push with --compression estargz, or leave out --first-run.")
        if compression == "estargz":
            from torchkiln.engines import compress

            compress.check_tools(self.name, compression)
            return compress.push_converted(self.runner, self.name, self.info.binary, image, image, compression,
                                           first_run=first_run)
        if compression != "gzip":
            from torchkiln.engines import get_engine
            from torchkiln.engines.compress import push_compressed

            podman = self if self.name == "podman" else get_engine("podman", self.runner)
            assert isinstance(podman, OciEngine)
            return push_compressed(self, podman, image, compression)
        r = self.runner.run(
            [self.info.binary, "push", image],
            what=f"{self.name} push {image}",
            hint=f"Check the registry part of {image} and the engine's login ({self.name} login REGISTRY).",
            classify=lambda result: registry_failure(self.name, image, result),
        )
        return pushed_digest(r.output)

    def import_tar(self, tarball: Path, ref: str, *, changes: Sequence[str] = ()) -> str:
        """Import a root-filesystem tarball as image ``ref``; returns its id."""
        cmd = [self.info.binary, "import"]
        for c in changes:
            cmd += ["--change", c]
        cmd += [str(tarball), ref]
        r = self.runner.run(cmd, what=f"{self.name} import")
        return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
