"""Running a ``BuildInvocation``: the only side effects of ``kiln build``.

``execute(invocation, engine)`` writes the context, checks the base, prepares the package sources
(wheel folders linked in, local indexes served, secrets written into the scratch folder), runs the
engine's build command exactly as planned, and then makes the result visible under its name: the
image is built untagged (the engine writes its id to the planned image-id file) and tagged only
after the build succeeded, a ``.sif`` is moved into place only after it was written whole. So a
failed build never leaves a half-made image under the spec's name. The scratch folder (and the
secrets in it) is removed whatever happens.

The engine is passed in; tests hand ``execute`` a fake one (no daemon), the way pypa/build takes a
runner.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchkiln.building import sources as src
from torchkiln.building.emulation import (
    DEFAULT_PLATFORM,
    base_for_platform,
    builds_here,
    host_platform,
    platform_flag,
    require_emulation,
)
from torchkiln.building.invocation import BuildInvocation, BuildOptions, ImageBuild, SifBuild, plan_spec
from torchkiln.building.options import ApptainerOptions
from torchkiln.contract import BASE_LABEL_PREFIX, VENV
from torchkiln.engines.engine import BuildEvent, Engine, StepRecord, require_store
from torchkiln.errors import BuildError, InputError, KilnError, LockError, ResolveError
from torchkiln.images.sif import is_sif
from torchkiln.provenance import (
    SBOM_SCRIPT,
    make_sbom,
    sbom_path,
    write_sbom,
)
from torchkiln.runner import Runner


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
    #: where the build cache went (None: not exported) and the references it was imported from
    cache_to: str | None = None
    cache_from: tuple[str, ...] = ()
    #: the CycloneDX SBOM written beside the image, and the image's provenance labels
    sbom: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

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
            "cache_to": self.cache_to,
            "cache_from": list(self.cache_from),
            "labels": dict(self.labels),
            "sbom": self.sbom,
        }


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


def ensure_base(engine: Engine, base: str, python: str, python_source: str,
                platform: str = DEFAULT_PLATFORM) -> None:
    """The base image must be local or pullable, be of the plan's platform, and hold the Python the plan needs."""
    native = platform == host_platform()
    flag = platform_flag(platform)
    if not engine.image_exists(base):
        if not engine.pull(base, platform=None if native else platform):
            made = base_for_platform("kiln-base:bookworm", platform)
            raise InputError(
                f"the base image {base} ({platform}) is not in {engine.info.name}'s local store and cannot be pulled.",
                hint=(
                    f"Without a registry, make a base offline: `kiln base bootstrap{flag}` (Debian bookworm + "
                    f"Python 3.11, tagged {made}), then make it this machine's base once with `kiln config set base "
                    "kiln-base:bookworm` (or build with `--base kiln-base:bookworm`, or set "
                    "`image = \"kiln-base:bookworm\"` in the `base` table of kiln.toml; an arm64 plan takes its "
                    f"-arm64 sibling). Or load an image you have (`{engine.info.name} load -i FILE`) and tag it {base}."
                ),
            )
    details = engine.inspect_image(base)
    want = platform.split("/", 1)[1]
    if details.architecture and details.architecture != want:
        raise InputError(
            f"the base image {base} is {details.platform}, but the plan builds a {platform} image.",
            hint=(f"Use a {platform} base: `kiln base bootstrap{flag}` makes "
                  f"{base_for_platform('kiln-base:bookworm', platform)} (kiln-base tags are picked per platform), "
                  f"or pull the image for it (`{engine.info.name} pull --platform {platform} {base}`). Or set "
                  f"[image] platform to {details.platform}."),
        )
    _check_base_python(base, details.labels, python, python_source)


def ensure_locked_digest(engine: Engine, base: str, lock: str) -> None:
    """The base digest a lock pins must still be local or pullable (registries delete old digests)."""
    if engine.image_exists(base) or engine.pull(base):
        return
    raise LockError(
        f"the base image {base} pinned by {lock} is neither in {engine.info.name}'s store nor in its registry "
        "any more (or the registry cannot be reached).",
        hint="Check that the registry is reachable and logged in; if the digest was deleted there, lock the base's "
             "current digest with `kiln lock SPEC --upgrade` and commit the lock.",
    )


def check_locked_base(engine: Engine, base: str, base_id: str, lock: str) -> None:
    """A locked build FROM a base that only the local store has: it must be the image the lock saw."""
    found = engine.inspect_image(base).id
    if found != base_id:
        raise LockError(
            f"the base image {base} is not the one {lock} was written with (image id {found[:19]}, "
            f"the lock's {base_id[:19]}).",
            hint="Build on the locked base (push it to a registry and lock it there, so the lock pins its digest), "
                 "or lock the new base: kiln lock SPEC --upgrade.",
        )


def _check_base_python(base: str, labels: Mapping[str, str], python: str, python_source: str) -> None:
    found = labels.get(f"{BASE_LABEL_PREFIX}.python")
    if found and found != python and python_source == "image":
        raise ResolveError(
            f"the base image {base} has Python {found}, but the spec asks for Python {python}.",
            hint=(
                f"Set `version = \"{found}\"` in the `python` table of kiln.toml, or bootstrap a suite whose "
                f"python3 is {python} (`kiln base bootstrap --suite SUITE`)."
            ),
        )


def ensure_sif_base(engine: Engine, options: ApptainerOptions, python: str, python_source: str,
                    base_image: str) -> None:
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
                hint=f"Write it where Docker is (`kiln export {base_image} --format "
                     f"{'sif' if options.bootstrap == 'localimage' else options.bootstrap} -o FILE`) and copy it here.",
            )
    if options.bootstrap == "localimage" and options.source is not None:
        if not is_sif(Path(options.source)):
            raise InputError(f"{options.source} is not a SIF file (Bootstrap localimage needs one).",
                             hint="Give a .sif, or use --bootstrap docker-archive / oci-archive for a tar.")
        _check_base_python(options.source, engine.inspect_image(options.source).labels, python, python_source)


def execute(
    inv: BuildInvocation,
    engine: Engine,
    *,
    progress: Callable[[BuildEvent], None] | None = None,
    started: float | None = None,
) -> BuildSummary:
    """Run ``inv`` with ``engine`` (see the module docstring); ``started``: when the command began."""
    start = time.monotonic() if started is None else started
    if isinstance(inv, SifBuild):
        ensure_sif_base(engine, inv.apptainer, inv.python, inv.python_source, inv.base_image)
    else:
        if inv.lock is not None and "@sha256:" in inv.base_image:
            ensure_locked_digest(engine, inv.base_image, inv.lock)
        ensure_base(engine, inv.base_image, inv.python, inv.python_source, inv.platform)
        if inv.base_id is not None:
            check_locked_base(engine, inv.base_image, inv.base_id, inv.lock or "kiln.lock")
        # every RUN of a foreign platform's image runs under qemu: say so before the build, not as
        # "exec format error" in its first step (a remote builder's kernel is its own business)
        if builds_here({**os.environ, **engine.runner.env}):
            require_emulation(inv.platform, f"Building {inv.image}")
    inv.write_context(engine.runner)
    output = inv.output_file
    step_secrets = {k: v for k, v in inv.secrets.items() if v.name.startswith("step-")}
    values = step_secret_values(step_secrets, os.environ)
    with (src.private_folder(inv.scratch),
          src.prepare(inv.sources, inv.context, secrets_dir=inv.scratch / "secrets") as prepared):
        assert {**prepared.secrets, **step_secrets} == inv.secrets and prepared.network == inv.network, \
            "sources differ from the plan"
        write_step_secrets(step_secrets, values)
        if output is not None:
            with src.private_folder(output.parent):
                outcome = engine.run_build(inv.command, secrets=prepared.secrets, progress=progress)
                if not is_sif(output):
                    raise BuildError(
                        f"apptainer build reported success but wrote no SIF file at {output}.",
                        hint="Rerun with --debug --verbose and read apptainer's output.",
                    )
                os.replace(output, inv.image)
        else:
            outcome = engine.run_build(inv.command, secrets=prepared.secrets, progress=progress)
        sources_record = {**inv.sources.to_dict(), **prepared.to_dict()}
    if output is None and not outcome.image_id:
        raise InputError(
            f"{inv.engine.name} reported success but wrote no image id.",
            hint="Rerun with --debug and check the engine's output.",
        )
    # only an image in a store has tags (a .sif is named by its path): plan_build gives a .sif none
    store = require_store(engine, "tag an image", "Build with docker or podman.") if inv.tags else None
    if store is not None:
        for ref in inv.tags:
            store.tag(outcome.image_id, ref)
    details = engine.inspect_image(inv.image)
    if store is not None and inv.push:
        for ref in inv.tags:
            store.push(ref)
    # an inline-cache builder's cache travels in the image: pushed as the cache reference too
    if store is not None and isinstance(inv, ImageBuild) and inv.cache_push is not None:
        if not (inv.push and inv.cache_push in inv.tags):
            store.tag(outcome.image_id, inv.cache_push)
            store.push(inv.cache_push)
    if output is not None:  # apptainer caches base layers, never build steps: every stage runs
        hits, misses = 0, len([s for s in outcome.steps if s.is_instruction])
        export_stage, image_id, size = "sif", details.id, Path(inv.image).stat().st_size
    else:
        hits, misses = cache_counts(outcome.steps)
        export_stage, image_id, size = "export", outcome.image_id, details.size
    return BuildSummary(
        image=inv.image,
        image_id=image_id,
        target=inv.target,
        engine=inv.engine.to_dict(),
        seconds=time.monotonic() - start,
        build_seconds=outcome.seconds,
        export_seconds=sum(s.seconds or 0.0 for s in outcome.steps if s.stage == export_stage),
        context=str(inv.context),
        size_bytes=size,
        layers=details.layers,
        stages=summarize_stages(outcome.steps),
        steps=outcome.steps,
        cache_hits=hits,
        cache_misses=misses,
        base_image=inv.base_image,
        sources=sources_record,
        pushed=inv.push,
        cache_to=inv.cache_to,
        cache_from=inv.cache_from,
        sbom=record_sbom(engine, inv, outcome.image_id) if isinstance(inv, ImageBuild) and inv.sbom else None,
        labels=inv.labels,
    )


def step_secret_values(paths: Mapping[str, Path], env: Mapping[str, str]) -> dict[str, str]:
    """The values of the ``[[steps]]`` secrets, from the variables of their names (checked before the build)."""
    missing = sorted(name for name in paths if name not in env)
    if missing:
        raise InputError(
            f"the spec's [[steps]] mount the build secret{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
            f"and no environment variable of that name is set.",
            hint=f"Set it for the build (`export {missing[0]}=...`, or `read -s {missing[0]}; export {missing[0]}`); "
                 "its value is passed as a BuildKit secret and reaches no layer.",
        )
    return {name: env[name] for name in paths}


def write_step_secrets(paths: Mapping[str, Path], values: Mapping[str, str]) -> None:
    """Write each ``[[steps]]`` secret into the build's private scratch folder (mode 600), for the build only."""
    for name, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(values[name])


def installed_distributions(engine: Engine, image: str) -> list[dict[str, Any]] | None:
    """What the image's venv holds, for its SBOM: read in place from the engine's storage where it
    can be (no container: ~0.5 s less per build here, far more for an emulated arm64 image), else
    listed by the venv's own Python in a container. None when the image has no venv to read."""
    import json

    from torchkiln.engines.engine import StoreEngine
    from torchkiln.images.dists import venv_distributions
    from torchkiln.images.storage import locate_in_engine

    if isinstance(engine, StoreEngine):
        try:
            stored, _ = locate_in_engine(engine, image, engine.inspect_image(image), "auto", direct_hint="")
            if stored is not None:
                return venv_distributions(stored.layer_dirs, VENV)
        except (KilnError, OSError):
            pass  # the container below answers instead
    r = engine.run(image, [f"{VENV}/bin/python", "-c", SBOM_SCRIPT], check=False, entrypoint="")
    try:
        dists = json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:  # something in the image printed more than the script's JSON
        dists = None
    return dists if isinstance(dists, list) else None


def record_sbom(engine: Engine, inv: ImageBuild, image_id: str) -> str | None:
    """Write the built image's SBOM beside it (``torchkiln.provenance``); its path, None when the image
    has no Python venv to read."""
    dists = installed_distributions(engine, inv.image)
    if dists is None:
        return None
    locked: dict[tuple[str, str], list[str]] | None = None
    if inv.lock is not None:
        from packaging.utils import canonicalize_name

        from torchkiln.lock import read_lock

        locked = {}
        for w in read_lock(Path(inv.lock)).wheels:
            if w.group in ("torch", "packages"):
                locked.setdefault((str(canonicalize_name(w.name)), w.version), []).append(w.sha256)
    text = make_sbom(image=inv.image, image_id=image_id, labels=inv.labels, distributions=dists, locked=locked)
    return str(write_sbom(sbom_path(image_id), text))


def build_image(
    spec_path: Path,
    engine: Any,
    options: BuildOptions | None = None,
    *,
    progress: Callable[[BuildEvent], None] | None = None,
    env: Mapping[str, str] | None = None,
    runner: Runner | None = None,
) -> BuildSummary:
    """Build the image a spec describes and tag it: ``plan_spec`` then ``execute``."""
    start = time.monotonic()
    inv = plan_spec(spec_path, engine, options or BuildOptions(), env=env, runner=runner)
    return execute(inv, engine, progress=progress, started=start)
