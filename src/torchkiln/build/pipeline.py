"""``kiln build`` as a library call: spec → plan → build context → engine build → tag → summary.

The image is built untagged (the engine writes its id to an ``--iidfile``) and tagged only after
the build succeeded, so a failed build never leaves a half-made image under the spec's name.
Package sources are merged (flags > environment > spec > pip configuration, see
``torchkiln.build.sources``) and handed to the engine as secrets for the duration of the build only.

With apptainer the image is a ``.sif`` file, not a tag: the Apptainer definition (``kiln.def``) is
rendered in place of the Dockerfile, ``apptainer build`` writes the file into a private folder
beside its destination, and it is moved into place only after the build succeeded (the same
promise: a failed build never leaves a half-made image under the spec's name). The destination is
``--tag`` (a path ending in ``.sif``), else ``NAME_TAG.sif`` next to the spec, so that ``kiln run``
and ``kiln verify`` find it from the spec alone. There is one image, so ``--target dev`` is an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchkiln.build import sources as src
from torchkiln.build.context import write_apptainer_context, write_context
from torchkiln.cache import kiln_cache_dir
from torchkiln.contract import BASE_LABEL_PREFIX, image_ref, sif_name
from torchkiln.engines.apptainer import APPTAINER, ApptainerEngine, require_runtime
from torchkiln.engines.engine import BuildEvent, Engine, StepRecord
from torchkiln.errors import BuildError, InputError, ResolveError
from torchkiln.plan import BuildPlan
from torchkiln.render.apptainer import DEFFILE, ApptainerOptions
from torchkiln.runner import Runner
from torchkiln.sif import is_sif

TARGETS = ("runtime", "dev")


@dataclass(frozen=True)
class BuildOptions:
    target: str = "runtime"
    base: str | None = None  # replaces the plan's base image
    tag: str | None = None  # replaces the image reference ("name:tag")
    context_dir: Path | None = None  # where the build context is rendered
    no_cache: bool = False
    push: bool = False
    from_pip: bool = False  # import the host's pip configuration as the lowest source layer
    flags: src.SourceLayer = field(default_factory=lambda: src.SourceLayer("flag"))
    #: apptainer only: where the definition's base comes from (``Bootstrap:`` / ``From:``); file
    #: paths are relative to the current folder
    apptainer: ApptainerOptions = field(default_factory=ApptainerOptions)


@dataclass(frozen=True)
class StageSummary:
    name: str
    seconds: float
    steps: int
    cached: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": round(self.seconds, 2), "steps": self.steps, "cached": self.cached}


@dataclass(frozen=True)
class BuildSummary:
    image: str
    image_id: str
    target: str
    engine: dict[str, str]
    seconds: float  # wall time of the whole command (render, sources, build, tag)
    build_seconds: float  # the engine's build alone
    export_seconds: float
    context: str
    size_bytes: int
    layers: int
    stages: tuple[StageSummary, ...]
    steps: tuple[StepRecord, ...]
    cache_hits: int
    cache_misses: int
    base_image: str
    sources: dict[str, Any]
    pushed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "image_id": self.image_id,
            "target": self.target,
            "engine": self.engine,
            "seconds": round(self.seconds, 2),
            "build_seconds": round(self.build_seconds, 2),
            "export_seconds": round(self.export_seconds, 2),
            "size_bytes": self.size_bytes,
            "layers": self.layers,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "stages": [s.to_dict() for s in self.stages],
            "steps": [s.to_dict() for s in self.steps if s.is_instruction],
            "base_image": self.base_image,
            "context": self.context,
            "sources": self.sources,
            "pushed": self.pushed,
        }


def load_plan(spec_path: Path, *, base: str | None = None) -> tuple[BuildPlan, Path]:
    """Read and resolve a spec; returns the plan (with ``base`` applied) and the spec's folder."""
    from torchkiln.knowledge import load_knowledge
    from torchkiln.resolve import resolve
    from torchkiln.spec import load_spec

    p = spec_path / "kiln.toml" if spec_path.is_dir() else spec_path
    plan = resolve(load_spec(p), load_knowledge())
    if base:
        plan = dataclasses.replace(plan, base_image=base)
    return plan, p.resolve().parent


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


def default_context_dir(plan: BuildPlan, spec_dir: Path) -> Path:
    """A stable folder per (spec folder, image name), so BuildKit's context transfer stays incremental."""
    digest = hashlib.sha256(str(spec_dir).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.image_name).strip("-")
    return kiln_cache_dir() / "contexts" / f"{name}-{digest}"


def summarize_stages(steps: tuple[StepRecord, ...]) -> tuple[StageSummary, ...]:
    """Time and cache hits per Dockerfile stage, in order of first appearance (pure)."""
    order: list[str] = []
    acc: dict[str, list[float]] = {}
    for s in steps:
        if not s.is_instruction:
            continue
        if s.stage not in acc:
            order.append(s.stage)
            acc[s.stage] = [0.0, 0, 0]
        a = acc[s.stage]
        a[0] += s.seconds or 0.0
        a[1] += 1
        a[2] += 1 if s.status == "cached" else 0
    return tuple(StageSummary(n, acc[n][0], int(acc[n][1]), int(acc[n][2])) for n in order)


def cache_counts(steps: tuple[StepRecord, ...]) -> tuple[int, int]:
    """(hits, misses) over the Dockerfile's instructions (FROM lines are neither)."""
    counted = [s for s in steps if s.is_instruction and not s.name.upper().startswith("FROM ")]
    hits = sum(1 for s in counted if s.status == "cached")
    return hits, len(counted) - hits


def ensure_base(engine: Engine, plan: BuildPlan) -> None:
    """The base image must be local or pullable, and hold the Python the plan needs."""
    base = plan.base_image
    if not engine.image_exists(base) and not engine.pull(base):
        raise InputError(
            f"the base image {base} is not in {engine.name}'s local store and cannot be pulled.",
            hint=(
                "Without a registry, make a base offline: `kiln base bootstrap` (Debian bookworm + Python 3.11), "
                "then build with `--base kiln-base:bookworm` or set `image = \"kiln-base:bookworm\"` in the `base` "
                f"table of kiln.toml. Or load an image you have (`{engine.name} load -i FILE`) and tag it {base}."
            ),
        )
    _check_base_python(base, engine.inspect_image(base).labels, plan)


def _check_base_python(base: str, labels: Mapping[str, str], plan: BuildPlan) -> None:
    python = labels.get(f"{BASE_LABEL_PREFIX}.python")
    if python and python != plan.python and plan.python_source == "image":
        raise ResolveError(
            f"the base image {base} has Python {python}, but the spec asks for Python {plan.python}.",
            hint=(
                f"Set `version = \"{python}\"` in the `python` table of kiln.toml, or bootstrap a suite whose "
                f"python3 is {plan.python} (`kiln base bootstrap --suite SUITE`)."
            ),
        )


def ensure_sif_base(engine: ApptainerEngine, plan: BuildPlan, options: ApptainerOptions) -> None:
    """A file bootstrap's base must exist (a ``localimage`` .sif: and hold the plan's Python).

    Registry (``docker``) and ``docker-daemon`` bases are fetched by ``apptainer build`` itself:
    apptainer has no store to look in first, and a failed fetch fails the bootstrap stage with a hint.
    """
    if not options.takes_files:
        return
    for option, value in (("--from", options.source), ("--builder-from", options.builder_source)):
        if value is not None and not Path(value).is_file():
            raise InputError(
                f"the base image file {value} (given with {option} for Bootstrap {options.bootstrap}) does not exist.",
                hint=f"Write it where Docker is (`kiln export {plan.base_image} --format "
                     f"{'sif' if options.bootstrap == 'localimage' else options.bootstrap} -o FILE`) and copy it here.",
            )
    if options.bootstrap == "localimage" and options.source is not None:
        if not is_sif(Path(options.source)):
            raise InputError(f"{options.source} is not a SIF file (Bootstrap localimage needs one).",
                             hint="Give a .sif, or use --bootstrap docker-archive / oci-archive for a tar.")
        _check_base_python(options.source, engine.inspect_image(options.source).labels, plan)


@contextmanager
def _file_beside(dest: Path) -> Iterator[Path]:
    """A path in a private folder next to ``dest`` for the build to write; the folder is removed after."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp / dest.name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sources(
    plan: BuildPlan, spec_dir: Path, engine: Engine, options: BuildOptions,
    env: Mapping[str, str] | None, runner: Runner | None,
) -> src.Sources:
    """The build's package sources: flags > environment > spec > (with --sources-from-pip) pip's config."""
    return src.resolve_sources(
        flags=options.flags,
        env=env,
        plan_sources=plan.sources,
        spec_dir=spec_dir,
        from_pip=options.from_pip,
        runner=runner or engine.runner,
    )


def build_image(
    spec_path: Path,
    engine: Engine,
    options: BuildOptions | None = None,
    *,
    progress: Callable[[BuildEvent], None] | None = None,
    env: Mapping[str, str] | None = None,
    runner: Runner | None = None,
) -> BuildSummary:
    """Build the image a spec describes and tag it; see the module docstring."""
    options = options or BuildOptions()
    if options.target not in TARGETS:
        raise InputError(f"unknown target {options.target!r}.", hint=f"Choose one of: {', '.join(TARGETS)}.")
    start = time.monotonic()
    plan, spec_dir = load_plan(spec_path, base=options.base)
    if isinstance(engine, ApptainerEngine):
        return _build_sif(plan, spec_dir, engine, options, start=start, progress=progress, env=env, runner=runner)
    ref = image_ref(plan, options.target, options.tag)
    sources = _sources(plan, spec_dir, engine, options, env, runner)
    ensure_base(engine, plan)
    ctx = (options.context_dir or default_context_dir(plan, spec_dir)).resolve()
    write_context(plan, spec_dir, ctx)
    with src.prepare(sources, ctx) as prepared:
        outcome = engine.build(
            ctx,
            ctx / "Dockerfile",
            target=options.target,
            secrets=prepared.secrets,
            network=prepared.network,
            no_cache=options.no_cache,
            progress=progress,
        )
        sources_record = {**sources.to_dict(), **prepared.to_dict()}
    if not outcome.image_id:
        raise InputError(
            f"{engine.name} reported success but wrote no image id.",
            hint="Rerun with --debug and check the engine's output.",
        )
    engine.tag(outcome.image_id, ref)
    details = engine.inspect_image(ref)
    pushed = False
    if options.push:
        engine.push(ref)
        pushed = True
    hits, misses = cache_counts(outcome.steps)
    export = sum(s.seconds or 0.0 for s in outcome.steps if s.stage == "export")
    return BuildSummary(
        image=ref,
        image_id=outcome.image_id,
        target=options.target,
        engine=engine.info.to_dict(),
        seconds=time.monotonic() - start,
        build_seconds=outcome.seconds,
        export_seconds=export,
        context=str(ctx),
        size_bytes=details.size,
        layers=details.layers,
        stages=summarize_stages(outcome.steps),
        steps=outcome.steps,
        cache_hits=hits,
        cache_misses=misses,
        base_image=plan.base_image,
        sources=sources_record,
        pushed=pushed,
    )


def _build_sif(
    plan: BuildPlan,
    spec_dir: Path,
    engine: ApptainerEngine,
    options: BuildOptions,
    *,
    start: float,
    progress: Callable[[BuildEvent], None] | None,
    env: Mapping[str, str] | None,
    runner: Runner | None,
) -> BuildSummary:
    """``build_image`` with apptainer: the definition file in, a ``.sif`` out (see the module docstring)."""
    require_runtime(options.target)
    if options.push:
        raise InputError(
            "apptainer has no image store to push a tag from: the image is a .sif file.",
            hint="Drop --push and push the file after the build: apptainer push IMAGE.sif oras://REGISTRY/NAME:TAG",
        )
    dest = sif_path(plan, spec_dir, options.tag)
    app = absolute_sources(options.apptainer, Path.cwd())
    sources = _sources(plan, spec_dir, engine, options, env, runner)
    ensure_sif_base(engine, plan, app)
    ctx = (options.context_dir or default_context_dir(plan, spec_dir)).resolve()
    write_apptainer_context(plan, spec_dir, ctx, app)
    with src.prepare(sources, ctx) as prepared, _file_beside(dest) as partial:
        # apptainer shares the host's network, so local index servers on 127.0.0.1 need no option
        outcome = engine.build(ctx, ctx / DEFFILE, secrets=prepared.secrets, no_cache=options.no_cache,
                               progress=progress, output=partial)
        if not is_sif(partial):
            raise BuildError(
                f"apptainer build reported success but wrote no SIF file at {partial}.",
                hint="Rerun with --debug --verbose and read apptainer's output.",
            )
        os.replace(partial, dest)
        sources_record = {**sources.to_dict(), **prepared.to_dict()}
    details = engine.inspect_image(str(dest))
    base = app.from_value(plan)
    return BuildSummary(
        image=str(dest),
        image_id=details.id,
        target="runtime",
        engine=engine.info.to_dict(),
        seconds=time.monotonic() - start,
        build_seconds=outcome.seconds,
        export_seconds=sum(s.seconds or 0.0 for s in outcome.steps if s.stage == "sif"),
        context=str(ctx),
        size_bytes=dest.stat().st_size,
        layers=details.layers,
        stages=summarize_stages(outcome.steps),
        steps=outcome.steps,
        cache_hits=0,  # apptainer caches base layers, never build steps: every stage runs
        cache_misses=len([s for s in outcome.steps if s.is_instruction]),
        base_image=base if app.bootstrap == "docker" else f"{app.bootstrap}:{base}",
        sources=sources_record,
        pushed=False,
    )
