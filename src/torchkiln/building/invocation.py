"""What one build will do, computed before anything runs: the frozen ``BuildInvocation``.

``plan_build(plan, spec_dir, options, engine, sources)`` decides everything a build does: the files
of the context, the engine's command line and environment, the secrets and where they will be, the
network, the tags, whether to push, and the output (an image in the engine's store, or a ``.sif``
file). ``kiln build --dry-run`` prints this object; ``torchkiln.building.execute.execute`` runs exactly
it. It reads no more than facts: the engine's (``engine.info``, its command spelling), the merged
package sources, and whether the paths kiln.toml names exist.

Every path the build writes is fixed here, so the dry run shows the same command the build runs:
the image-id file and the package-source secrets live in a private scratch folder of the build
(``scratch``: made 0700 when the build starts, removed when it ends); a ``.sif`` is written into a
folder beside its destination and moved into place only after the build succeeded.

``platform`` is the plan's (``[image] platform``, or inferred from the targets; ``--platform``
re-resolves the spec for another one); docker and podman get ``--platform`` unless the engine's own
platform is certainly the same (an amd64 plan built here, on amd64, with no --platform asked).

To add a build option (cache import/export, a push destination): a field on
``BuildOptions`` (what the user asked), a field here (what the build will do), computed in
``plan_build`` and passed on in the ``BuildRequest`` (``torchkiln.engines.engine``), and its
spelling in each engine's ``build_command`` (docker and podman: their flavour's ``spell_build``);
``execute`` needs a change only when the option adds a step after the build (as ``push`` does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from torchkiln.building import sources as src
from torchkiln.building.bootstrap import base_for_platform
from torchkiln.building.context import ContextFiles, apptainer_context, dockerfile_context
from torchkiln.building.emulation import host_platform
from torchkiln.cache import kiln_cache_dir
from torchkiln.contract import image_ref, sif_name
from torchkiln.engines.apptainer import APPTAINER, require_runtime
from torchkiln.engines.engine import BuildCommand, BuildRequest, EngineInfo, ImageStore, check_reference
from torchkiln.errors import InputError
from torchkiln.plan import BuildPlan
from torchkiln.render.apptainer import DEFFILE, ApptainerOptions

TARGETS = ("runtime", "dev")


@dataclass(frozen=True)
class BuildOptions:
    """What the user asked for (``kiln build``'s options)."""

    target: str = "runtime"
    base: str | None = None  # replaces the plan's base image
    tag: str | None = None  # replaces the image reference ("name:tag"); apptainer: the .sif to write
    context_dir: Path | None = None  # where the build context is rendered
    no_cache: bool = False
    push: bool = False
    #: registry build cache: references to import steps from, and one to export this build's steps to
    cache_from: tuple[str, ...] = ()
    cache_to: str | None = None
    #: install exactly the spec's kiln.lock (applied to the plan by ``plan_spec``)
    locked: bool = False
    from_pip: bool = False  # import the host's pip configuration as the lowest source layer
    flags: src.SourceLayer = field(default_factory=lambda: src.SourceLayer("flag"))
    #: the image's platform ("linux/arm64"): ``kiln build --platform`` resolves the spec for it; matrix
    #: builds set it for cells a builder makes under emulation. It must be the plan's.
    platform: str | None = None
    #: apptainer only: where the definition's base comes from (``Bootstrap:`` / ``From:``); file
    #: paths are relative to the current folder
    apptainer: ApptainerOptions = field(default_factory=ApptainerOptions)


class CommandSpeller(Protocol):
    """What planning needs of an engine: its facts and how it spells a build (no side effects)."""

    info: EngineInfo

    def build_command(self, request: BuildRequest) -> BuildCommand: ...


@dataclass(frozen=True)
class BuildInvocation:
    """One build, decided: ``--dry-run`` prints it, ``execute`` runs exactly it."""

    engine: EngineInfo
    target: str
    #: what the build makes: an image reference (docker/podman) or the path of a .sif (apptainer)
    image: str
    context: Path
    files: ContextFiles
    command: BuildCommand
    #: build secrets by id, and where each file is while the build runs (never in the context)
    secrets: dict[str, Path]
    network: src.Network
    #: references the built image gets after a successful build (none for a .sif: its path names it)
    tags: tuple[str, ...]
    push: bool
    no_cache: bool
    #: the build's private folder (image-id file, generated secrets): made at start, removed at the end
    scratch: Path
    #: the image the build starts from, and the Python the plan expects in it
    base_image: str
    python: str
    python_source: str
    sources: src.Sources
    #: apptainer: where its base comes from (file bootstraps are checked before the build)
    apptainer: ApptainerOptions | None = None
    #: the image's OCI platform: the plan's (``--platform`` of the engine; see ``engine_platform``)
    platform: str = "linux/amd64"
    #: registry build cache (in the command's spelling): imported from, exported to
    cache_from: tuple[str, ...] = ()
    cache_to: str | None = None
    #: docker's classic builder exports the cache inline: the built image is tagged and pushed as
    #: this reference after the build (buildx and podman push their cache during the build)
    cache_push: str | None = None
    #: a locked build FROM a base in the local store only: the image id the base must still have
    base_id: str | None = None
    #: the lock a locked build installs
    lock: str | None = None
    #: provenance labels set with --label (``torchkiln.provenance``)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: write the image's SBOM after the build (docker/podman images)
    sbom: bool = False

    @property
    def output_file(self) -> Path | None:
        """The ``.sif`` the build writes (moved to ``image`` after success); None for store images."""
        return self.command.writes if self.apptainer is not None else None

    def to_dict(self) -> dict[str, Any]:
        """What ``kiln build --dry-run --json`` prints (URLs masked; secrets by path, never by content)."""
        return {
            "image": self.image,
            "target": self.target,
            "engine": self.engine.to_dict(),
            "context": str(self.context),
            "files": self.files.to_dict(),
            "command": list(self.command.argv),
            "env": dict(self.command.env),
            "cwd": None if self.command.cwd is None else str(self.command.cwd),
            "writes": str(self.command.writes),
            "secrets": {k: str(v) for k, v in sorted(self.secrets.items())},
            "network": self.network,
            "tags": list(self.tags),
            "push": self.push,
            "no_cache": self.no_cache,
            "platform": self.platform,
            "cache_from": list(self.cache_from),
            "cache_to": self.cache_to,
            "cache_push": self.cache_push,
            "lock": self.lock,
            "base_id": self.base_id,
            "labels": dict(self.labels),
            "sbom": self.sbom,
            "scratch": str(self.scratch),
            "base_image": self.base_image,
            "sources": self.sources.to_dict(),
        }


def engine_platform(platform: str, asked: str | None, host: str | None = None) -> str | None:
    """The ``--platform`` to give docker/podman: the plan's, except for an amd64 plan on an amd64
    host when none was asked for (the engine builds that anyway, and the command stays as it was)."""
    if asked or platform != "linux/amd64" or (host or host_platform()) != "linux/amd64":
        return platform
    return None


def default_context_dir(plan: BuildPlan, spec_dir: Path) -> Path:
    """A stable folder per (spec folder, image name), so BuildKit's context transfer stays incremental."""
    digest = hashlib.sha256(str(spec_dir).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.image_name).strip("-")
    return kiln_cache_dir() / "contexts" / f"{name}-{digest}"


def scratch_dir(context: Path, pid: int | None = None) -> Path:
    """The private folder of this process's build of ``context`` (the image id file, the secret files).

    One per process: two builds of one spec at once (or its runtime and dev targets) each have their
    own, so neither removes the other's id file or secrets. Folders of processes that died without
    cleaning up are removed by the next build (``execute.sweep_scratch``)."""
    digest = hashlib.sha256(str(context).encode()).hexdigest()[:10]
    return kiln_cache_dir() / "scratch" / f"{context.name}-{digest}-{os.getpid() if pid is None else pid}"


def sif_path(plan: BuildPlan, spec_dir: Path, tag: str | None = None) -> Path:
    """Where an apptainer build writes its image: ``tag`` (a ``.sif`` path), else ``NAME_TAG.sif`` by the spec."""
    if not tag:
        return spec_dir / sif_name(plan)
    if not tag.endswith(".sif"):
        raise InputError(
            f"with apptainer the image is a file, and --tag names it: {tag!r} does not end in .sif.",
            hint=f"Give a path such as --tag {sif_name(plan)}, or leave --tag out ({spec_dir / sif_name(plan)}).",
        )
    return Path(tag).expanduser().resolve()


def image_for(engine_name: str, plan: BuildPlan, spec_dir: Path, target: str = "runtime",
              tag: str | None = None) -> str:
    """The image a build of ``target`` makes: a reference in docker/podman, a ``.sif`` path with apptainer."""
    if engine_name == APPTAINER:
        require_runtime(target)
        return str(sif_path(plan, spec_dir, tag))
    return image_ref(plan, target, tag)


def absolute_sources(options: ApptainerOptions, cwd: Path) -> ApptainerOptions:
    """File bootstraps with absolute paths: `kiln build` renders into its cache, not where the user is."""
    if not options.takes_files:
        return options

    def absolute(value: str | None) -> str | None:
        return None if value is None else str((cwd / Path(value).expanduser()).resolve())

    return dataclasses.replace(options, source=absolute(options.source),
                               builder_source=absolute(options.builder_source))


def partial_path(dest: Path) -> Path:
    """Where a build writes the ``.sif`` that becomes ``dest``: a private folder beside it (same disk)."""
    return dest.parent / f".{dest.name}.{os.getpid()}.partial" / dest.name  # per process: concurrent builds


def plan_build(
    plan: BuildPlan,
    spec_dir: Path,
    options: BuildOptions,
    engine: CommandSpeller,
    sources: src.Sources,
    *,
    cwd: Path,
    labels: Mapping[str, str] | None = None,
) -> BuildInvocation:
    """Decide the whole build (see the module docstring); ``cwd`` resolves relative ``--from`` paths;
    ``labels``: the provenance labels the image gets (``torchkiln.provenance``), set as ``--label``."""
    if options.target not in TARGETS:
        raise InputError(f"unknown target {options.target!r}.", hint=f"Choose one of: {', '.join(TARGETS)}.")
    if engine.info.name == APPTAINER and (options.platform or plan.platform != host_platform()):
        raise InputError(
            f"apptainer builds for the machine it runs on ({host_platform()}): it has no --platform, and the "
            f"plan is {plan.platform}.",
            hint="Build the image with docker or podman (--platform), then export it: kiln export IMAGE --format "
                 f"sif; or build on a {plan.platform} machine.",
        )
    if options.platform and options.platform != plan.platform:
        raise InputError(
            f"--platform {options.platform} differs from the plan's platform {plan.platform}.",
            hint="Resolve the spec for that platform (`kiln build --platform` does), or set [image] platform.",
        )
    if options.base and plan.torch.image is not None and options.base != plan.base_image:
        from torchkiln.errors import SpecError

        raise SpecError(
            f"--base {options.base} would replace {plan.base_image}, whose own torch this spec builds on "
            "([torch] source = \"image\"): kiln read torch, CUDA, Python and the archs from that image.",
            hint=f"Set [base] image = \"{options.base}\" in the spec instead, so that its facts are read and checked.",
        )
    if options.push and not isinstance(engine, ImageStore):  # a capability, not a name: see require_store
        raise InputError(
            f"{engine.info.name} has no image store to push a tag from: the image is a .sif file.",
            hint="Drop --push and push the file after the build: apptainer push IMAGE.sif oras://REGISTRY/NAME:TAG",
        )
    # a bootstrapped base names its platform in its tag: an arm64 plan builds on kiln-base:SUITE-arm64
    plan = dataclasses.replace(plan, base_image=base_for_platform(options.base or plan.base_image, plan.platform))
    spec_dir = spec_dir.resolve()
    info = engine.info
    context = (options.context_dir or default_context_dir(plan, spec_dir)).resolve()
    scratch = scratch_dir(context)
    secrets = src.secret_paths(sources, scratch / "secrets")
    network = src.build_network(sources)
    if info.name == APPTAINER:
        require_runtime(options.target)
        if plan.locked is not None:
            raise InputError("--locked builds docker and podman images; apptainer definitions are not locked yet.",
                             hint="Build the locked image with docker and convert it: kiln export IMAGE --format sif.")
        if options.cache_to or options.cache_from:
            raise InputError(
                "apptainer keeps no build cache in a registry: --cache-to/--cache-from are for docker and podman.",
                hint="Drop --cache-to/--cache-from (apptainer caches base layers itself, in APPTAINER_CACHEDIR).",
            )
        dest = sif_path(plan, spec_dir, options.tag)
        app = absolute_sources(options.apptainer, cwd)
        files = apptainer_context(plan, spec_dir, app)
        writes = partial_path(dest)
        # apptainer shares the host's network, so local index servers on 127.0.0.1 need no option
        command = engine.build_command(BuildRequest(context, context / DEFFILE, writes, no_cache=options.no_cache))
        base = app.from_value(plan)
        return BuildInvocation(
            engine=info, target="runtime", image=str(dest), context=context, files=files,
            command=command, secrets=secrets, network=network, tags=(),
            push=False, no_cache=options.no_cache, scratch=scratch,
            base_image=base if app.bootstrap == "docker" else f"{app.bootstrap}:{base}",
            python=plan.python, python_source=plan.python_source, sources=sources, apptainer=app,
            platform=plan.platform,
        )
    ref = image_ref(plan, options.target, options.tag)
    files = dockerfile_context(plan, spec_dir)
    cache_from = tuple(check_reference(r, "--cache-from") for r in options.cache_from)
    cache_to = None if options.cache_to is None else check_reference(options.cache_to, "--cache-to")
    command = engine.build_command(BuildRequest(
        context, context / "Dockerfile", scratch / "iid", target=options.target, secrets=secrets, network=network,
        labels=dict(labels or {}), no_cache=options.no_cache, platform=engine_platform(plan.platform, options.platform),
        cache_from=cache_from, cache_to=cache_to,
    ))
    inline = cache_to is not None and info.name == "docker" and info.builder != "buildx"
    return BuildInvocation(
        engine=info, target=options.target, image=ref, context=context, files=files,
        command=command, secrets=secrets, network=network, tags=(ref,),
        push=options.push, no_cache=options.no_cache, scratch=scratch, base_image=plan.base_image,
        python=plan.python, python_source=plan.python_source, sources=sources, platform=plan.platform,
        cache_from=cache_from, cache_to=cache_to, cache_push=cache_to if inline else None,
        base_id=plan.locked.base_id if plan.locked is not None and "@sha256:" not in plan.base_image else None,
        lock=plan.locked.lock if plan.locked is not None else None,
        labels=dict(labels or {}), sbom=True,
    )
