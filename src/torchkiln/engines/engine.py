"""The engine interface: the only code in torchkiln that builds or runs containers.

One small abstract class (``Engine``) with one implementation per engine (``docker.py`` for
BuildKit through the docker CLI, ``podman.py``, ``apptainer.py`` for ``.sif`` files). Everything an
engine returns is a frozen dataclass, so callers never parse engine output themselves.
"""

from __future__ import annotations

import json
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from torchkiln.diagnose import diagnose, format_diagnoses
from torchkiln.errors import BuildError, InputError, KilnError, RegistryAuthError, RegistryError, SourceError
from torchkiln.runner import Completed, Runner

EngineName = Literal["docker", "podman", "apptainer"]
ENGINE_NAMES: tuple[EngineName, ...] = ("docker", "podman", "apptainer")
#: the engines picked when none is named; apptainer builds .sif files, not images in a store, so it
#: is used only when asked for by name (``--engine apptainer`` or ``KILN_ENGINE=apptainer``)
AUTO_ENGINES: tuple[EngineName, ...] = ("docker", "podman")

StepStatus = Literal["running", "cached", "done", "error"]


@dataclass(frozen=True)
class EngineInfo:
    name: EngineName
    binary: str
    client_version: str
    server_version: str
    #: how images are built: "buildx" (docker buildx build), "buildkit" (docker build with
    #: DOCKER_BUILDKIT=1), "buildah" (podman build)
    builder: str

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "binary": self.binary,
            "client_version": self.client_version,
            "server_version": self.server_version,
            "builder": self.builder,
        }


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class BuildEvent:
    """A change of one build step, sent to the progress callback as it happens."""

    step: str  # engine-specific id ("#7" for BuildKit, "2/3:4" for podman)
    stage: str  # Dockerfile stage name ("builder", "runtime"); "internal" for BuildKit's own steps
    name: str  # the instruction as the engine prints it
    status: StepStatus
    seconds: float | None = None
    line: str | None = None  # one line of the step's output (status "running")


@dataclass
class StepRecord:
    step: str
    stage: str
    name: str
    status: StepStatus = "running"
    seconds: float | None = None
    log: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        """The instruction without its ``--mount`` options, shortened for one line."""
        text = re.sub(r"--mount=\S+\s+", "", self.name)
        text = re.sub(r"\s+", " ", text).strip()
        return text if len(text) <= 110 else text[:107] + "..."

    @property
    def is_instruction(self) -> bool:
        """A Dockerfile instruction (not BuildKit's context transfer, metadata or export steps)."""
        return self.stage not in ("internal", "export", "auth", "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "stage": self.stage,
            "name": self.title,
            "status": self.status,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
        }


@dataclass(frozen=True)
class BuildCommand:
    """One engine build, spelled out: what runs, with what environment, where, and what it writes."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path | None
    #: the file the build leaves: the image id (docker/podman ``--iidfile``) or the image itself (.sif)
    writes: Path

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(self.env), "cwd": None if self.cwd is None else str(self.cwd),
                "writes": str(self.writes)}


@dataclass(frozen=True)
class BuildOutcome:
    image_id: str
    seconds: float
    steps: tuple[StepRecord, ...]


@dataclass(frozen=True)
class ImageDetails:
    id: str
    size: int  # bytes, as the engine reports it (uncompressed)
    layers: int
    user: str
    env: tuple[str, ...]
    labels: Mapping[str, str]
    created: str
    #: the image's tags as the engine lists them
    repo_tags: tuple[str, ...] = ()
    #: uncompressed layer digests, base first (``RootFS.Layers``)
    diff_ids: tuple[str, ...] = ()
    #: the storage driver (``GraphDriver.Name``: overlay2 for docker, overlay for podman) and its data
    #: (``LowerDir``, ``UpperDir``: the layer folders on the engine's machine)
    driver: str = ""
    driver_data: Mapping[str, str] = field(default_factory=dict)
    #: ``repo@sha256:…`` of each registry the image was pushed to or pulled from
    repo_digests: tuple[str, ...] = ()

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any]) -> ImageDetails:
        config = data.get("Config") or {}
        rootfs = data.get("RootFS") or {}
        graph = data.get("GraphDriver") if isinstance(data.get("GraphDriver"), dict) else {}
        gdata = graph.get("Data") if isinstance(graph.get("Data"), dict) else {}
        return cls(
            id=str(data.get("Id", "")),
            size=int(data.get("Size", 0)),
            layers=len(rootfs.get("Layers") or []),
            user=str(config.get("User") or ""),
            env=tuple(config.get("Env") or ()),
            labels=dict(config.get("Labels") or {}),
            created=str(data.get("Created", "")),
            repo_tags=tuple(str(t) for t in data.get("RepoTags") or () if isinstance(t, str)),
            diff_ids=tuple(str(d) for d in rootfs.get("Layers") or () if isinstance(d, str)),
            driver=str(graph.get("Name") or ""),
            driver_data={str(k): str(v) for k, v in gdata.items() if isinstance(v, str)},
            repo_digests=tuple(str(d) for d in data.get("RepoDigests") or ()),
        )


ProgressCallback = Callable[[BuildEvent], None]


class ProgressParser(Protocol):
    """What an engine's build-output parser offers (see ``torchkiln.engines.progress``)."""

    failed: StepRecord | None

    @property
    def steps(self) -> tuple[StepRecord, ...]: ...

    def feed(self, line: str) -> None: ...
    def finish(self, ok: bool) -> None: ...


class Engine(ABC):
    """A container engine. Every method runs the engine's CLI through ``runner``."""

    name: EngineName

    def __init__(self, info: EngineInfo, runner: Runner) -> None:
        self.info = info
        self.runner = runner

    # -- the interface -------------------------------------------------------------------------
    def version(self) -> EngineInfo:
        return self.info

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
        """Build ``dockerfile`` in ``context``; the image is left untagged (tag it with ``tag``).

        ``build_command`` with an image-id file in a temporary folder, then ``run_build``: for
        callers that build a context of their own (benchmarks, tests); ``kiln build`` plans its
        command first (``torchkiln.build.invocation``) and calls ``run_build`` with it.
        """
        with tempfile.TemporaryDirectory(prefix="kiln-iid-") as tmp:
            iid = Path(tmp) / "iid"
            cmd, env = self.build_command(
                context, dockerfile, target=target, secrets=secrets, network=network,
                labels=labels, no_cache=no_cache, iidfile=iid,
            )
            return self.run_build(BuildCommand(tuple(cmd), env, None, iid), secrets=secrets, progress=progress)

    def run_build(
        self,
        command: BuildCommand,
        *,
        secrets: Mapping[str, Path] | None = None,
        labels: Mapping[str, str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome:
        """Run exactly ``command``; the image id is what it wrote to ``command.writes``.

        Shared by the engines that build OCI images from a Dockerfile (docker, podman): each gives
        its command line (``build_command``: secrets and labels are in it) and its progress parser.
        """
        parser = self._progress_parser(progress)
        name = self.info.name
        result = self.runner.run(list(command.argv), env=dict(command.env), cwd=command.cwd, on_line=parser.feed,
                                 check=False, what=f"{name} build")
        parser.finish(result.returncode == 0)
        if result.returncode != 0:
            raise build_failure(name, parser.failed, result)
        image_id = command.writes.read_text().strip() if command.writes.exists() else ""
        return BuildOutcome(image_id=image_id, seconds=result.seconds, steps=parser.steps)

    def _progress_parser(self, progress: ProgressCallback | None) -> ProgressParser:
        """The parser of this engine's build output (engines that override ``build`` need none)."""
        raise NotImplementedError(f"{type(self).__name__} has no build progress parser")

    @abstractmethod
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
        """The command line (and extra environment) ``build`` runs; for dry runs and docs.

        ``cache_from`` / ``cache_to``: registry references of a build cache to import / export, in
        the engine's own spelling (see ``torchkiln.build.invocation``: docker's classic builder can
        only export the cache inline, in the image it then pushes).
        """

    def run(
        self,
        image: str,
        argv: Sequence[str],
        *,
        gpus: bool = False,
        mounts: Sequence[Mount] = (),
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        workdir: str | None = None,
        network: str | None = None,
        entrypoint: str | None = None,
        passthrough: bool = False,
        interactive: bool = False,
        check: bool = True,
        on_line: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> Completed:
        """Run ``argv`` in a fresh container of ``image`` (removed afterwards)."""
        cmd = [self.info.binary, "run", "--rm", *self._run_flags()]
        if interactive:
            cmd.append("-i")
        if passthrough and interactive and _stdin_is_tty():
            cmd.append("-t")
        if gpus:
            cmd += self._gpu_flags()
        for m in mounts:
            cmd += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        if user is not None:
            cmd += ["--user", user]
        if workdir is not None:
            cmd += ["--workdir", workdir]
        if network is not None:
            cmd += ["--network", network]
        if entrypoint is not None:
            cmd += ["--entrypoint", entrypoint]
        cmd += [image, *argv]
        return self.runner.run(
            cmd,
            passthrough=passthrough,
            on_line=on_line,
            check=check,
            timeout=timeout,
            what=f"{self.name} run {image}",
            error=lambda m, h, d: BuildError(m, h, details=d),
        )

    def save(self, image: str, dest: Path) -> Path:
        """Write ``image`` as a docker-archive tar to ``dest``."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.runner.run(
            self._save_command(image, dest),
            what=f"{self.name} save {image}",
            error=lambda m, h, d: InputError(m, h or f"Check that `{image}` exists: `kiln build` it first.", details=d),
        )
        return dest

    @contextmanager
    def save_stream(self, image: str) -> Iterator[int]:
        """``image`` as a docker-archive on a pipe (the engine's ``save`` to stdout): yields its read end."""
        with self.runner.pipe(
            self._save_command(image, None), what=f"{self.name} save {image}",
            error=lambda m, h, d: InputError(m, h or f"Check that `{image}` exists: `kiln build` it first.", details=d),
        ) as fd:
            yield fd

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

    def tag(self, source: str, ref: str) -> None:
        self.runner.run([self.info.binary, "tag", source, ref], what=f"{self.name} tag")

    def remove_image(self, image: str, *, missing_ok: bool = True) -> bool:
        """Remove a tag (or an image id); returns whether something was removed."""
        if missing_ok and not self.image_exists(image):
            return False
        self.runner.run([self.info.binary, "rmi", image], what=f"{self.name} rmi {image}")
        return True

    def pull(self, image: str, *, timeout: float | None = 120) -> bool:
        """Try to pull ``image``; False (never an error) when no registry has it."""
        r = self.runner.run([self.info.binary, "pull", image], check=False, timeout=timeout)
        return r.returncode == 0

    def push(self, image: str) -> str:
        """Push ``image`` with the engine's own login; returns the pushed manifest's digest ("" if unknown).

        The registry keeps blobs but no tag from a push that failed part-way, so the tag either
        names the whole image or (as before) nothing new. Credentials are never passed here: the
        engine reads what ``docker login`` / ``podman login`` stored.
        """
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

    # -- engine specifics ----------------------------------------------------------------------
    def _run_flags(self) -> list[str]:
        """Extra flags for every ``run`` (none by default)."""
        return []

    @abstractmethod
    def _gpu_flags(self) -> list[str]: ...

    @abstractmethod
    def _save_command(self, image: str, dest: Path | None) -> list[str]:
        """The engine's save of ``image`` as a docker-archive to ``dest`` (to stdout for None)."""


def _stdin_is_tty() -> bool:
    import sys

    return sys.stdin.isatty()


# -- classification of build failures -------------------------------------------------------------

_UNREACHABLE = re.compile(
    r"(Failed to fetch|error sending request|dns error|failed to lookup address|Connection refused|"
    r"Could not connect|Network is unreachable|invalid peer certificate|certificate verify failed|"
    r"UnknownIssuer|tcp connect error|Temporary failure in name resolution|Name or service not known|"
    r"Connection reset by peer|operation timed out)",
    re.IGNORECASE,
)
#: a package whose dependencies want another torch than the one pinned (uv's and pip's resolver messages):
#: "Because needs-x==1.0 depends on torch==2.14.1 and ...", "Because all versions of x depend on torch>=2.9
#: and torch==2.13.0+cpu", pip's "x 1.0 depends on torch==2.14.1"
_TORCH_WANTED = re.compile(
    r"(?:Because (?:all versions of |only )?(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*)(?:==(?P<ver>[^\s,]+))? depends? on "
    r"|(?P<ppkg>[A-Za-z0-9][A-Za-z0-9._-]*) (?P<pver>[0-9][^\s,]*) depends on )torch(?P<want>[=<>!~][^\s,]*)"
)
_TORCH_PINNED = re.compile(r"torch==(?P<have>[^\s,]+)")
_UNSOLVABLE = re.compile(r"No solution found when resolving|ResolutionImpossible|conflicting dependencies")


def _torch_conflict(text: str, where: str, details: str) -> KilnError | None:
    """A package that wants another torch than the pinned one: named, with the torch it wanted."""
    if not _UNSOLVABLE.search(text):
        return None
    m = _TORCH_WANTED.search(text)
    if m is None:
        return None
    pkg, ver = (m.group("pkg"), m.group("ver")) if m.group("pkg") else (m.group("ppkg"), m.group("pver"))
    if ver is None:
        asked = re.search(rf"you require {re.escape(pkg)}==(?P<v>[^\s,]+)", text)
        ver = asked.group("v").rstrip(".,") if asked else None
    want = m.group("want").rstrip(".,")
    pins = [p.group("have").rstrip(".,") for p in _TORCH_PINNED.finditer(text[m.end():])
            if p.group("have").rstrip(".,") != want.removeprefix("==")]
    have = f" torch {pins[0]}" if pins else " torch"
    return BuildError(
        f"{pkg} {ver or '(every version)'} needs torch{want}, but the image's{have} is pinned and kiln does not "
        f"replace it: {pkg} was refused during {where}.",
        hint=(
            f"Install a release of {pkg} built for the image's torch (its requirements name the torch it needs), or "
            "build on a base whose torch it supports. The pin comes from the constraints kiln installs with (the "
            "base image's /etc/pip/constraint.txt and a pin of its torch); never clear PIP_CONSTRAINT to get past it."
        ),
        details=details,
    )


_BASE_MISSING = re.compile(
    r"(failed to resolve source metadata for|pull access denied|manifest unknown|"
    r"repository does not exist|initializing source docker://|error creating build container|"
    r"failed to do request: Head \"https://|no such host|short-name .* did not resolve)",
    re.IGNORECASE,
)


# -- registry failures (push, pull, cache export and import) -------------------------------------

_REGISTRY_AUTH = re.compile(
    r"(unauthorized|authentication required|no basic auth credentials|denied: requested access|"
    r"insufficient_scope|incorrect username or password|status: 401|401 Unauthorized|403 Forbidden)",
    re.IGNORECASE,
)
_REGISTRY_TLS = re.compile(r"(x509:|certificate signed by unknown authority|tls: |server gave HTTP response to HTTPS)",
                           re.IGNORECASE)
_REGISTRY_DOWN = re.compile(
    r"(connection refused|no such host|i/o timeout|dial tcp|network is unreachable|no route to host|"
    r"server misbehaving|context deadline exceeded|connection reset by peer)",
    re.IGNORECASE,
)
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def registry_of(ref: str) -> str:
    """The registry part of an image reference (``docker.io`` when the name has none)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def repository_of(ref: str) -> str:
    """``ref`` without its tag or digest (``HOST:PORT/NAME:TAG`` → ``HOST:PORT/NAME``)."""
    name = ref.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
#: the repository path, tag and digest of a reference (the distribution spec's grammar)
_REFERENCE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?$")


def check_reference(ref: str, option: str) -> str:
    """``ref`` if it can name an image in a registry (``HOST[:PORT]/NAME[:TAG]``), else an InputError."""
    host = registry_of(ref)
    rest = ref[len(host) + 1:] if ref.startswith(host + "/") else ref
    if not ref or "://" in ref or any(c.isspace() for c in ref) or not _REFERENCE.match(rest):
        raise InputError(
            f"{option} {ref!r} is not an image reference.",
            hint=f"Give a registry reference without a scheme, e.g. {option} registry.example.com:5000/team/app:buildcache.",
        )
    return ref


def pushed_digest(output: str) -> str:
    """The manifest digest ``docker push`` / ``podman push`` reported ("" when it printed none)."""
    found = _DIGEST.findall(output)
    return found[-1] if found else ""


def registry_failure(engine: str, ref: str, result: Completed) -> KilnError | None:
    """A typed error for a failed registry operation on ``ref``: credentials, TLS, or unreachable."""
    text = result.output
    registry = registry_of(ref)
    details = f"$ {result.command}\n{result.tail(12)}".rstrip()
    if _REGISTRY_AUTH.search(text):
        return RegistryAuthError(
            f"the registry {registry} refused {engine}'s credentials for {ref}.",
            hint=(
                f"Log in with the engine ({engine} login {registry}; in CI with --password-stdin from a secret) "
                "as a user allowed to push to this repository, then rerun. torchkiln never takes a password itself."
            ),
            details=details,
        )
    if _REGISTRY_TLS.search(text):
        return RegistryError(
            f"{engine} does not trust the TLS certificate of the registry {registry}.",
            hint=(
                f"Install the registry's CA certificate for the engine (docker: /etc/docker/certs.d/{registry}/ca.crt; "
                f"podman: /etc/containers/certs.d/{registry}/ca.crt), or fix the registry's certificate."
            ),
            details=details,
        )
    if _REGISTRY_DOWN.search(text):
        return RegistryError(
            f"the registry {registry} cannot be reached (for {ref}).",
            hint=(
                "Check the registry address in the image name (HOST:PORT/NAME:TAG), that the registry is running, "
                "and the network or proxy between this machine and it."
            ),
            details=details,
        )
    return None


def classify_build_failure(
    failing: StepRecord | None, output_tail: str, *, base_image: str | None = None
) -> KilnError | None:
    """A more specific error than "build failed" for a failed build, or None.

    - the FROM image is neither local nor pullable → InputError telling to bootstrap a base;
    - a package install step cannot reach its index → SourceError.
    """
    text = "\n".join(failing.log if failing else []) + "\n" + output_tail
    where = _step_title(failing)
    details = _failure_details(failing, output_tail)
    if failing is None or failing.name.upper().startswith("FROM") or failing.stage == "internal":
        if _BASE_MISSING.search(text):
            name = base_image or "the base image"
            return InputError(
                f"{name} is not in the engine's local store and cannot be pulled.",
                hint=(
                    "Make an offline base with `kiln base bootstrap` and build on it "
                    "(`kiln build SPEC --base kiln-base:bookworm`, or `image` in the `base` table of kiln.toml), "
                    f"or load the image into the engine (`docker load` / `podman load`) as {name}."
                ),
                details=details,
            )
    conflict = _torch_conflict(text, where, details) if failing is not None and failing.is_instruction else None
    if conflict is not None:
        return conflict
    if _UNREACHABLE.search(text) and failing is not None and failing.is_instruction:
        return SourceError(
            f"the package index could not be reached during {where}.",
            hint=(
                "Check the index URL and the network: use --network host when the index is on this "
                "machine or behind its proxy, --ca-bundle for a TLS-intercepting proxy, or a local "
                "wheel folder with --find-links (see docs/build.md)."
            ),
            details=details,
        )
    return None


def _step_title(step: StepRecord | None) -> str:
    if step is None:
        return "the build"
    # no square brackets: the CLI prints messages as rich markup
    return f"stage '{step.stage}', step {step.title}" if step.stage else f"step {step.title}"


def _failure_details(step: StepRecord | None, output_tail: str, lines: int = 25) -> str:
    parts: list[str] = []
    if step is not None:
        parts.append(f"failing {_step_title(step)}:")
        parts.extend(f"  {ln}" for ln in step.log[-lines:])
    tail = [ln for ln in output_tail.splitlines() if ln.strip()]
    # the engine's own last words (BuildKit: "error: failed to solve: ..."; podman: "Error: ...")
    final = [ln for ln in tail[-6:] if re.match(r"^\s*(error|Error|ERROR)\b", ln)]
    if not parts:
        parts.extend(tail[-lines:])
    else:
        parts.extend(final)
    return "\n".join(parts)


def build_flags(
    context: Path,
    *,
    target: str | None,
    secrets: Mapping[str, Path] | None,
    network: str | None,
    labels: Mapping[str, str] | None,
    no_cache: bool,
    iidfile: Path | None,
    platform: str | None = None,
    cache: Sequence[str] = (),
) -> list[str]:
    """The `build` options docker and podman spell alike, then ``cache`` (the engine's own spelling
    of cache import/export), ending with the context folder."""
    cmd: list[str] = []
    if platform:
        cmd += ["--platform", platform]
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
    cmd += cache
    cmd.append(str(context))
    return cmd


def build_failure(
    engine: str, failing: StepRecord | None, result: Completed, *, base_image: str | None = None
) -> KilnError:
    """The error for a failed build: specific when recognised, else a BuildError with the step's tail."""
    specific = classify_build_failure(failing, result.tail(60), base_image=base_image)
    if specific is not None:
        return specific
    # compiled extensions fail in recognisable ways (OOM-killed compilers, build isolation, archs
    # the toolkit cannot target, toolkit/torch mismatch): say which, with the lines that show it
    found = diagnose(result.output)
    if found:
        return BuildError(
            f"{engine} build failed at {_step_title(failing)}: {found[0].title}",
            hint=" ".join(dict.fromkeys(d.hint for d in found)),
            details=_failure_details(failing, result.tail(60)) + "\n\n" + format_diagnoses(found),
        )
    return BuildError(
        f"{engine} build failed at {_step_title(failing)}.",
        hint=(
            "Read the step's last lines above; fix the spec (package names, versions) or the app files "
            "and rebuild — finished steps are cached. Rerun with --debug to see the full engine command."
        ),
        details=_failure_details(failing, result.tail(60)),
    )
