"""The engine interface: the only code in torchkiln that builds or runs containers.

Two small protocols: ``Engine``, what every engine does (spell a build from a ``BuildRequest``,
run it, run a container, find, read and remove images), and ``ImageStore``, what engines with an
image store add (save, load, tag, push, import). Two implementations: ``OciEngine`` (``oci.py``) for
docker and podman, which differ only in a flavour (``docker.py``, ``podman.py``), and
``ApptainerEngine`` (``apptainer.py``, ``.sif`` files, no store). Callers that need a store ask
with ``require_store``. Everything an engine returns is a frozen dataclass, so callers never parse
engine output themselves.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from torchkiln.diagnose import diagnose, format_diagnoses
from torchkiln.errors import (
    BuildError,
    InputError,
    KilnError,
    RegistryAuthError,
    RegistryError,
    SourceError,
    disk_full,
)
from torchkiln.runner import Completed, Runner

EngineName = Literal["docker", "podman", "apptainer"]
ENGINE_NAMES: tuple[EngineName, ...] = ("docker", "podman", "apptainer")
#: the engines picked when none is named; apptainer builds .sif files, not images in a store, so it
#: is used only when asked for by name (``--engine apptainer`` or ``KILN_ENGINE=apptainer``)
AUTO_ENGINES: tuple[EngineName, ...] = ("docker", "podman")
#: what a build makes: an image in the engine's store (docker, podman) or a .sif file (apptainer)
Output = Literal["image", "sif"]


def output_of(name: str | None) -> Output:
    """What the engine called ``name`` builds (None: the default engine, docker or podman: an image)."""
    return "sif" if name == "apptainer" else "image"

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

    # -- capabilities: planning and the CLI ask these, never the engine's name ---------------------

    @property
    def output(self) -> Output:
        """What a build makes: an image in the store (tags, push, --platform, registry cache) or a .sif."""
        return output_of(self.name)

    @property
    def cross_platform(self) -> bool:
        """Whether it builds for another platform than its machine's (``--platform``, emulated or not)."""
        return self.output == "image"

    @property
    def inline_cache(self) -> bool:
        """Whether a registry cache is exported inline, in the image (docker's classic builder: the
        image is then pushed as the cache reference after the build); buildx and podman push it themselves."""
        return self.name == "docker" and self.builder != "buildx"

    @property
    def remote_builders(self) -> bool:
        """Whether the client drives other daemons and builders (docker contexts, DOCKER_HOST, buildx builders)."""
        return self.name == "docker"

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
    def label(self) -> str:
        """What the step does, for people: ``install numpy==2.3.5``, ``install -r requirements-torch.txt``,
        ``apt install libgl1`` for the install steps torchkiln renders; else the ``title``."""
        return install_label(self.name) or self.title

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


#: options of ``uv pip install`` / ``apt-get install`` that take a value (skipped with it in a label)
_VALUED = frozenset({"--python", "-p", "-c", "--constraint", "--config-file", "--target", "--index-url", "-i",
                     "--extra-index-url", "-f", "--find-links", "--python-platform", "--only-binary", "-o"})
_INSTALLS = (("uv pip install", "install"), ("apt-get install", "apt install"))


def install_label(instruction: str) -> str | None:
    """``install PKG …`` for a step whose command installs packages (uv pip, apt-get), else None.

    Reads the instruction's first install command up to its ``&&``/``;``/``||``/``}``: the package words
    stay, options go, ``-r FILE`` becomes ``-r`` and the file's name. Plain text: nothing is run.
    """
    for command, verb in _INSTALLS:
        at = instruction.find(command)
        if at < 0:
            continue
        rest = re.split(r"&&|\|\||;|\}|\n", instruction[at + len(command):], maxsplit=1)[0].rstrip(" \\")
        words, skip = [], False
        for word in rest.split():
            if skip:
                skip = False
            elif word in ("-r", "--requirement"):
                words.append("-r")
            elif word.startswith("-"):
                skip = word in _VALUED
            else:
                word = word.strip("'\"")
                words.append(word.rsplit("/", 1)[-1] if words[-1:] == ["-r"] or "/" in word else word)
        if words:
            text = f"{verb} {' '.join(words)}"
            return text if len(text) <= 110 else text[:107] + "..."
    return None


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
    #: the image's platform as the engine records it ("linux", "arm64", "v8"); "" when not recorded
    os: str = ""
    architecture: str = ""
    variant: str = ""

    @property
    def platform(self) -> str:
        """``os/architecture`` ("linux/arm64"), "" when the engine records no architecture."""
        return f"{self.os or 'linux'}/{self.architecture}" if self.architecture else ""

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any]) -> ImageDetails:
        config = data.get("Config") or {}
        rootfs = data.get("RootFS") or {}
        graph: Mapping[str, Any] = data["GraphDriver"] if isinstance(data.get("GraphDriver"), dict) else {}
        gdata: Mapping[str, Any] = graph["Data"] if isinstance(graph.get("Data"), dict) else {}
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
            os=str(data.get("Os") or ""),
            architecture=str(data.get("Architecture") or ""),
            variant=str(data.get("Variant") or ""),
        )


ProgressCallback = Callable[[BuildEvent], None]


class ProgressParser(Protocol):
    """What an engine's build-output parser offers (see ``torchkiln.engines.progress``)."""

    failed: StepRecord | None

    @property
    def steps(self) -> tuple[StepRecord, ...]: ...

    def feed(self, line: str) -> None: ...
    def finish(self, ok: bool) -> None: ...


@dataclass(frozen=True)
class BuildRequest:
    """One build as an engine is asked to spell it: everything ``build_command`` reads.

    A new build option is a field here and its spelling in each engine's ``build_command`` (for
    docker and podman: their flavour's ``spell_build``); no signature changes anywhere else.
    """

    context: Path
    #: the Dockerfile, or apptainer's definition file
    build_file: Path
    #: the file the build leaves: the image-id file (docker/podman ``--iidfile``) or the ``.sif`` itself
    writes: Path
    target: str | None = None
    #: build secrets by id, and the file each is read from
    secrets: Mapping[str, Path] = field(default_factory=dict)
    network: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    #: the OCI platform to build for (``--platform``); None = the builder's own
    platform: str | None = None
    #: registry build cache: references to import steps from, and one to export this build's steps to
    #: (checked references; each flavour spells them its own way)
    cache_from: Sequence[str] = ()
    cache_to: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """One container run as an engine is asked to spell it: everything ``run_command`` reads.

    A new run option is a field here, a keyword of ``Engine.run`` and its spelling in each engine's
    ``run_command``; how the caller waits for the run (``check``, ``on_line``, ``timeout``) is not part of it.
    """

    image: str
    #: the command; none: the image's own (docker's CMD, apptainer's runscript)
    argv: tuple[str, ...] = ()
    #: attach every GPU
    gpus: bool = False
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    network: str | None = None
    #: replaces the image's entrypoint ("" clears it)
    entrypoint: str | None = None
    #: the run shares this terminal (its output is not captured)
    passthrough: bool = False
    #: keep stdin open (and a TTY when passed through to a terminal)
    interactive: bool = False


@runtime_checkable
class Engine(Protocol):
    """What every engine does (docker, podman, apptainer, a test's fake): build, run, find and read images.

    ``build_command`` is pure (it spells the build for ``kiln build --dry-run``); ``run_build``
    runs exactly what it spelled. Likewise ``run_command`` spells a ``RunRequest`` and ``run_request``
    runs it; ``run`` (and ``run_request``) are written here once, for every engine: docker, podman and
    apptainer subclass this protocol to share them and spell only ``run_command``. Images are named by
    reference in docker/podman and by path (a ``.sif``) in apptainer.
    """

    name: EngineName
    info: EngineInfo
    runner: Runner

    def build_command(self, request: BuildRequest) -> BuildCommand: ...

    def run_build(
        self,
        command: BuildCommand,
        *,
        secrets: Mapping[str, Path] | None = None,
        labels: Mapping[str, str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> BuildOutcome: ...

    def run_command(self, request: RunRequest) -> list[str]:
        """The command line that runs ``request`` (pure: nothing runs)."""
        ...

    def check_runnable(self, image: str) -> None:
        """Refuse, before anything runs, an image this engine cannot run (by default none: the engine says so)."""
        return None

    def run_request(
        self,
        request: RunRequest,
        *,
        check: bool = True,
        on_line: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> Completed:
        """Run exactly ``run_command(request)``; ``check``: a failure is a ``BuildError``."""
        self.check_runnable(request.image)
        cmd = self.run_command(request)
        return self.runner.run(cmd, passthrough=request.passthrough, on_line=on_line, check=check, timeout=timeout,
                               what=f"{self.name} {cmd[1]} {request.image}",
                               error=lambda m, h, d: BuildError(m, h, details=d))

    def run(
        self,
        image: str,
        argv: Sequence[str] = (),
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
        """Run ``argv`` in a fresh container of ``image`` (the options are ``RunRequest``'s)."""
        request = RunRequest(image, tuple(argv), gpus=gpus, mounts=tuple(mounts), env=dict(env or {}), user=user,
                             workdir=workdir, network=network, entrypoint=entrypoint, passthrough=passthrough,
                             interactive=interactive)
        return self.run_request(request, check=check, on_line=on_line, timeout=timeout)

    def image_exists(self, image: str) -> bool: ...
    def inspect_image(self, image: str) -> ImageDetails: ...
    def history(self, image: str) -> list[str]: ...
    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool: ...
    def remove_image(self, image: str, *, missing_ok: bool = True) -> bool: ...


@runtime_checkable
class ImageStore(Protocol):
    """What an engine with an image store adds (docker, podman; apptainer has none: its images are files).

    Callers that need it ask for it by capability, with ``require_store``; never by engine name.
    """

    def save(self, image: str, dest: Path) -> Path: ...
    def save_stream(self, image: str) -> AbstractContextManager[int]: ...
    def load(self, archive: Path) -> str: ...
    def tag(self, source: str, ref: str) -> None: ...
    def push(self, image: str, compression: str = "gzip", first_run: Path | None = None) -> str: ...
    def import_tar(self, tarball: Path, ref: str, *, changes: Sequence[str] = ()) -> str: ...


@runtime_checkable
class StoreEngine(Engine, ImageStore, Protocol):
    """An engine with an image store (what ``require_store`` returns)."""


def require_store(engine: Engine, what: str, hint: str) -> StoreEngine:
    """``engine`` as an image store, or an ``InputError`` (exit 7) saying it cannot ``what`` and ``hint``."""
    if isinstance(engine, ImageStore):
        return engine
    raise InputError(f"{engine.name} has no image store, so it cannot {what}.", hint=hint)


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
    r"server misbehaving|context deadline exceeded|connection reset by peer|"
    # a registry that accepts connections and never answers (docker: "net/http: request canceled (Client.Timeout
    # exceeded while awaiting headers)")
    r"Client\.Timeout exceeded|awaiting (response )?headers|TLS handshake timeout|request canceled)",
    re.IGNORECASE,
)
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def registry_of(ref: str) -> str:
    """The registry part of an image reference (``docker.io`` when the name has none)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def is_loopback(registry: str) -> bool:
    """True for ``localhost``/``127.x``/``[::1]`` registries (plain HTTP, as Docker allows by default)."""
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 or registry.startswith("[") else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
            hint=f"Give a registry reference without a scheme, e.g. {option} "
                 "registry.example.com:5000/team/app:buildcache.",
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
            f"the registry {registry} cannot be reached, or does not answer (for {ref}).",
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
    full = disk_full(text, details)  # torchkiln.errors: one wording for every command
    if full is not None:
        return full
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
