"""What one build will do, computed before anything runs: the frozen ``BuildInvocation``.

Every build, ``kiln build SPEC`` or a cell of ``kiln build --matrix``, is planned once, by
``plan_invocation`` (``plan_spec`` loads the spec first; the matrix hands it each cell's plan). The
invocation is one of two kinds, chosen by the engine's facts (``EngineInfo.output``), never by its
name: an ``ImageBuild`` (an image in the engine's store: tags, push, platform, registry cache, lock)
or a ``SifBuild`` (a ``.sif`` file: its bootstrap options).

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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from torchkiln.building import sources as src
from torchkiln.building.context import ContextFiles, apptainer_context, dockerfile_context, ensure_uv
from torchkiln.building.emulation import DEFAULT_PLATFORM, base_for_platform, host_platform
from torchkiln.building.options import ApptainerOptions
from torchkiln.cache import kiln_cache_dir
from torchkiln.contract import image_ref, sif_name
from torchkiln.engines.apptainer import require_runtime
from torchkiln.engines.engine import BuildCommand, BuildRequest, EngineInfo, Output, check_reference
from torchkiln.errors import InputError, SpecError
from torchkiln.load import engine_facts, load_plan
from torchkiln.plan import BuildPlan
from torchkiln.provenance import Provenance
from torchkiln.render.apptainer import DEFFILE, REGISTRY_BOOTSTRAP
from torchkiln.runner import Runner

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
    #: the user's settings file's [sources] (``torchkiln.settings``): below the spec, above pip's
    user_sources: src.SourceLayer | None = None
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
class _Build:
    """What every build decides, whatever it makes (see ``ImageBuild`` and ``SifBuild``)."""

    engine: EngineInfo
    #: what the build makes: an image reference (ImageBuild) or the path of a .sif (SifBuild)
    image: str
    context: Path
    files: ContextFiles
    command: BuildCommand
    #: build secrets by id, and where each file is while the build runs (never in the context)
    secrets: dict[str, Path]
    network: src.Network
    no_cache: bool
    #: the build's private folder (image-id file, generated secrets): made at start, removed at the end
    scratch: Path
    #: the image the build starts from, and the Python the plan expects in it
    base_image: str
    python: str
    python_source: str
    sources: src.Sources
    #: the image's OCI platform: the plan's (``--platform`` of an image build; see ``engine_platform``)
    platform: str

    def write_context(self, runner: Runner) -> None:
        """Write the context folder (``kiln build`` and its ``--dry-run``), with the uv of the image's CPU."""
        ensure_uv(self.platform, self.sources, runner)
        self.files.write(self.context)

    def _dict(self, **kind: Any) -> dict[str, Any]:
        """``kiln build --dry-run --json``: one set of keys for both kinds (URLs masked; secrets by path)."""
        return {
            "image": self.image,
            "target": kind["target"],
            "engine": self.engine.to_dict(),
            "context": str(self.context),
            "files": self.files.to_dict(),
            "command": list(self.command.argv),
            "env": dict(self.command.env),
            "cwd": None if self.command.cwd is None else str(self.command.cwd),
            "writes": str(self.command.writes),
            "secrets": {k: str(v) for k, v in sorted(self.secrets.items())},
            "network": self.network,
            "tags": list(kind["tags"]),
            "push": kind["push"],
            "no_cache": self.no_cache,
            "platform": self.platform,
            "cache_from": list(kind["cache_from"]),
            "cache_to": kind["cache_to"],
            "cache_push": kind["cache_push"],
            "lock": kind["lock"],
            "base_id": kind["base_id"],
            "labels": dict(kind["labels"]),
            "sbom": kind["sbom"],
            "scratch": str(self.scratch),
            "base_image": self.base_image,
            "sources": self.sources.to_dict(),
            "warnings": list(kind["warnings"]),
        }


@dataclass(frozen=True)
class ImageBuild(_Build):
    """An image built into the engine's store (docker, podman): built untagged, then tagged (and pushed)."""

    target: str = "runtime"
    #: references the built image gets after a successful build
    tags: tuple[str, ...] = ()
    push: bool = False
    #: registry build cache (in the command's spelling): imported from, exported to
    cache_from: tuple[str, ...] = ()
    cache_to: str | None = None
    #: an inline-cache builder (``EngineInfo.inline_cache``) exports the cache in the image: the built
    #: image is tagged and pushed as this reference after the build
    cache_push: str | None = None
    #: a locked build FROM a base in the local store only: the image id the base must still have
    base_id: str | None = None
    #: the lock a locked build installs
    lock: str | None = None
    #: provenance labels set with --label (``torchkiln.provenance``)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: write the image's SBOM after the build
    sbom: bool = True
    #: the plan's warnings (its [[steps]] findings among them), shown before the build
    warnings: tuple[str, ...] = ()

    @property
    def output_file(self) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return self._dict(target=self.target, tags=self.tags, push=self.push, cache_from=self.cache_from,
                          cache_to=self.cache_to, cache_push=self.cache_push, lock=self.lock, base_id=self.base_id,
                          labels=self.labels, sbom=self.sbom, warnings=self.warnings)


@dataclass(frozen=True)
class SifBuild(_Build):
    """A ``.sif`` file (apptainer): written into a private folder beside ``image``, moved there after success.
    It has no store: no tags, no push, no registry cache, no lock, no labels set from outside."""

    #: where the definition's base comes from (file bootstraps are checked before the build)
    apptainer: ApptainerOptions = field(default_factory=ApptainerOptions)
    #: the plan's warnings (its [[steps]] findings among them), shown before the build
    warnings: tuple[str, ...] = ()
    target: ClassVar[str] = "runtime"
    tags: ClassVar[tuple[str, ...]] = ()
    push: ClassVar[bool] = False
    cache_from: ClassVar[tuple[str, ...]] = ()
    cache_to: ClassVar[str | None] = None

    @property
    def labels(self) -> Mapping[str, str]:
        return {}

    @property
    def output_file(self) -> Path:
        """The ``.sif`` the build writes (moved to ``image`` after success)."""
        return self.command.writes

    def to_dict(self) -> dict[str, Any]:
        return self._dict(target=self.target, tags=(), push=False, cache_from=(), cache_to=None, cache_push=None,
                          lock=None, base_id=None, labels={}, sbom=False, warnings=self.warnings)


#: one build, decided: ``--dry-run`` prints it, ``execute`` runs exactly it; which kind follows from the
#: engine's ``EngineInfo.output``, never from its name
BuildInvocation = ImageBuild | SifBuild


def check_platform(platform: str, asked: str | None, info: EngineInfo) -> None:
    """The one check of a build's platform before planning: ``asked`` (``--platform``, a matrix cell's)
    must be the plan's, and an engine that builds only for its own machine gets only that machine's."""
    if not info.cross_platform and (asked or platform != host_platform()):
        raise InputError(
            f"{info.name} builds for the machine it runs on ({host_platform()}): it has no --platform, and "
            f"the plan is {platform}.",
            hint="Build the image with docker or podman (--platform), then export it: kiln export IMAGE --format "
                 f"sif; or build on a {platform} machine.",
        )
    if asked and asked != platform:
        raise InputError(
            f"--platform {asked} differs from the plan's platform {platform}.",
            hint="Resolve the spec for that platform (`kiln build --platform` does), or set [image] platform.",
        )


def engine_platform(platform: str, asked: str | None, host: str | None = None) -> str | None:
    """The ``--platform`` to give docker/podman: the plan's, except for an amd64 plan on an amd64
    host when none was asked for (the engine builds that anyway, and the command stays as it was)."""
    if asked or platform != DEFAULT_PLATFORM or (host or host_platform()) != DEFAULT_PLATFORM:
        return platform
    return None


def default_context_dir(plan: BuildPlan, spec_dir: Path) -> Path:
    """A stable folder per (spec folder, image name), so BuildKit's context transfer stays incremental."""
    digest = hashlib.sha256(str(spec_dir).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.image_name).strip("-")
    return kiln_cache_dir() / "contexts" / f"{name}-{digest}"


def scratch_dir(context: Path) -> Path:
    """The private folder of the build of ``context`` (one build of a context runs at a time)."""
    digest = hashlib.sha256(str(context).encode()).hexdigest()[:10]
    return kiln_cache_dir() / "scratch" / f"{context.name}-{digest}"


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


def image_for(output: Output, plan: BuildPlan, spec_dir: Path, target: str = "runtime",
              tag: str | None = None) -> str:
    """The image a build of ``target`` makes (``output``: ``EngineInfo.output``, or ``engines.output_of(NAME)``):
    a reference for an image in a store, a ``.sif`` path for a file."""
    if output == "sif":
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


def step_secret_paths(plan: BuildPlan, secrets_dir: Path) -> dict[str, Path]:
    """The build secrets ``[[steps]]`` mount, by id: each written from the variable of its name by ``execute``."""
    return {name: secrets_dir / f"step-{name}" for step in plan.steps for name in step.secrets}


def partial_path(dest: Path) -> Path:
    """Where a build writes the ``.sif`` that becomes ``dest``: a private folder beside it (same disk)."""
    return dest.parent / f".{dest.name}.partial" / dest.name


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
    check_platform(plan.platform, options.platform, engine.info)
    if options.base and plan.torch.image is not None and options.base != plan.base_image:
        raise SpecError(
            f"--base {options.base} would replace {plan.base_image}, whose own torch this spec builds on "
            "([torch] source = \"image\"): kiln read torch, CUDA, Python and the archs from that image.",
            hint=f"Set [base] image = \"{options.base}\" in the spec instead, so that its facts are read and checked.",
        )
    # a bootstrapped base names its platform in its tag: an arm64 plan builds on kiln-base:SUITE-arm64
    plan = dataclasses.replace(plan, base_image=base_for_platform(options.base or plan.base_image, plan.platform))
    context = (options.context_dir or default_context_dir(plan, spec_dir.resolve())).resolve()
    scratch = scratch_dir(context)
    # [[steps]] secrets: read from the environment variable of that name when the build runs (``execute``)
    secrets = {**src.secret_paths(sources, scratch / "secrets"), **step_secret_paths(plan, scratch / "secrets")}
    common = _Common(spec_dir.resolve(), context, scratch, secrets, src.build_network(sources), sources)
    return _PLANNERS[engine.info.output](plan, options, engine, common, cwd, dict(labels or {}))


@dataclass(frozen=True)
class _Common:
    """What both kinds of build decide the same way, before the engine's kind is asked."""

    spec_dir: Path
    context: Path
    scratch: Path
    secrets: dict[str, Path]
    network: src.Network
    sources: src.Sources


def _plan_sif(plan: BuildPlan, options: BuildOptions, engine: CommandSpeller, c: _Common, cwd: Path,
              labels: dict[str, str]) -> SifBuild:
    """A .sif: built for this machine's platform, from a definition file, with no store behind it."""
    name = engine.info.name
    if options.push:  # a capability, not a name: a .sif has no store to push a tag from
        raise InputError(
            f"{name} has no image store to push a tag from: the image is a .sif file.",
            hint=f"Drop --push and push the file after the build: {name} push IMAGE.sif oras://REGISTRY/NAME:TAG",
        )
    require_runtime(options.target)
    if plan.locked is not None:
        raise InputError(f"--locked builds images in a store; {name} definitions are not locked yet.",
                         hint="Build the locked image with docker and convert it: kiln export IMAGE --format sif.")
    if options.cache_to or options.cache_from:
        raise InputError(
            f"{name} keeps no build cache in a registry: --cache-to/--cache-from are for images in a store.",
            hint=f"Drop --cache-to/--cache-from ({name} caches base layers itself, in APPTAINER_CACHEDIR).",
        )
    dest = sif_path(plan, c.spec_dir, options.tag)
    app = absolute_sources(options.apptainer, cwd)
    files = apptainer_context(plan, c.spec_dir, app)
    writes = partial_path(dest)
    # apptainer shares the host's network, so local index servers on 127.0.0.1 need no option
    command = engine.build_command(BuildRequest(c.context, c.context / DEFFILE, writes, no_cache=options.no_cache))
    base = app.from_value(plan)
    return SifBuild(
        engine=engine.info, image=str(dest), context=c.context, files=files,
        command=command, secrets=c.secrets, network=c.network, no_cache=options.no_cache, scratch=c.scratch,
        base_image=base if app.bootstrap == REGISTRY_BOOTSTRAP else f"{app.bootstrap}:{base}",
        python=plan.python, python_source=plan.python_source, sources=c.sources, apptainer=app,
        platform=plan.platform, warnings=plan.warnings,
    )


def _plan_image(plan: BuildPlan, options: BuildOptions, engine: CommandSpeller, c: _Common, cwd: Path,
                labels: dict[str, str]) -> ImageBuild:
    """An image in the engine's store, from the Dockerfile context: tagged after the build, maybe pushed."""
    info = engine.info
    ref = image_ref(plan, options.target, options.tag)
    files = dockerfile_context(plan, c.spec_dir)
    cache_from = tuple(check_reference(r, "--cache-from") for r in options.cache_from)
    cache_to = None if options.cache_to is None else check_reference(options.cache_to, "--cache-to")
    command = engine.build_command(BuildRequest(
        c.context, c.context / "Dockerfile", c.scratch / "iid", target=options.target, secrets=c.secrets,
        network=c.network, labels=labels, no_cache=options.no_cache,
        platform=engine_platform(plan.platform, options.platform), cache_from=cache_from, cache_to=cache_to,
    ))
    return ImageBuild(
        engine=info, target=options.target, image=ref, context=c.context, files=files,
        command=command, secrets=c.secrets, network=c.network, tags=(ref,),
        push=options.push, no_cache=options.no_cache, scratch=c.scratch, base_image=plan.base_image,
        python=plan.python, python_source=plan.python_source, sources=c.sources, platform=plan.platform,
        cache_from=cache_from, cache_to=cache_to, cache_push=cache_to if info.inline_cache else None,
        base_id=plan.locked.base_id if plan.locked is not None and "@sha256:" not in plan.base_image else None,
        lock=plan.locked.lock if plan.locked is not None else None,
        labels=labels, sbom=True, warnings=plan.warnings,
    )


_PLANNERS: dict[Output, Callable[..., BuildInvocation]] = {"image": _plan_image, "sif": _plan_sif}


# -- the one path from a spec (or a matrix cell) to its invocation -----------------------------------


def engine_base_digest(engine: Any, base: str) -> str:
    """The registry digest of the base as the engine has it ("" when it has none, or no such image yet)."""
    from torchkiln.building.locking import base_digest

    if not hasattr(engine, "inspect_image") or not engine.image_exists(base):
        return ""
    return base_digest(base, engine.inspect_image(base).repo_digests)


def plan_invocation(
    plan: BuildPlan,
    spec_dir: Path,
    options: BuildOptions,
    engine: Any,
    *,
    provenance: Provenance,
    base: tuple[str, str] | None = None,
    digest_of: Callable[[str], str] | None = None,
    version: str | None = None,
    env: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    cwd: Path | None = None,
) -> BuildInvocation:
    """The one planning step of every build, a single spec's or a matrix cell's: the package sources
    (flags > environment > spec > the user's settings > pip's configuration), the provenance labels
    (``base``: the base's name and digest when known, as a lock knows them; else looked up with
    ``digest_of``, by default in ``engine``'s store; ``version``: the image's version label, by
    default the plan's tag, a matrix cell's own tag), then ``plan_build``."""
    run = runner or engine.runner
    if base is None:
        name = options.base or plan.base_image
        base = (name, (digest_of or (lambda b: engine_base_digest(engine, b)))(name))
    sources = src.resolve_sources(flags=options.flags, env=env, plan_sources=plan.sources, spec_dir=spec_dir,
                                  from_pip=options.from_pip, runner=run, user=options.user_sources)
    labels = provenance.labels(version or plan.tag, *base)
    return plan_build(plan, spec_dir, options, engine, sources, cwd=cwd or Path.cwd(), labels=labels)


def plan_spec(spec_path: Path, engine: Any, options: BuildOptions, *, env: Mapping[str, str] | None = None,
              runner: Runner | None = None) -> BuildInvocation:
    """spec file → plan → ``plan_invocation``: what ``kiln build`` and ``--dry-run`` share."""
    _spec, plan, spec_dir = load_plan(spec_path, facts=engine_facts(engine, pull=True), platform=options.platform)
    spec_dir = spec_dir.resolve()
    base: tuple[str, str] | None = None
    if options.locked:  # the lock answers the plan with its base as given (--base included)
        from torchkiln.building.locking import locked_plan

        if options.base:
            plan = dataclasses.replace(plan, base_image=options.base)
            options = dataclasses.replace(options, base=None)
        plan, lock = locked_plan(plan, spec_path)
        base = (lock.base.image, lock.base.digest)
    run = runner or engine.runner
    return plan_invocation(plan, spec_dir, options, engine, provenance=Provenance.of(spec_path, run, env),
                           base=base, env=env, runner=run)
