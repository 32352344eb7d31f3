"""``kiln build --matrix``: every cell of a matrix built on a pool of existing builders.

A *builder* is a Docker engine torchkiln already knows how to drive, reached another way: a
``DOCKER_HOST`` URL (``unix://``, ``tcp://``, ``ssh://``), a docker context (``DOCKER_CONTEXT``;
ssh or tcp+TLS endpoints are the context's business), or, where the buildx plugin is installed, a
buildx builder (``BUILDX_BUILDER``; any driver, kubernetes included). torchkiln runs no builder of
its own: each cell's ``BuildInvocation`` comes from ``plan_invocation``, the one planning step of
every build, and runs with ``execute(invocation, engine)``, the engine's runner pointing at the
cell's builder. ``plan_matrix`` does steps 1-4 below, ``run_matrix`` steps 5-6; the CLI
(``torchkiln.cli._build_matrix``) only names the builders, shows progress and prints the summary.

The order of work:

1. ``connect``: probe every builder (reachable, BuildKit, its platform, which daemon it is) and
   refuse, before anything builds, unreachable builders, the same daemon named twice, and cells
   whose platform no builder can build.
2. ``plan_cell``: a ``BuildInvocation`` per cell, planned once (its own context folder, its derived tag) and its
   *digest* (``cell_digest``: the rendered files, the copied files' sizes and times, the tags, the
   sources, push: what the image depends on, not which builder makes it).
3. the record of the last run (``MatrixRecord``, one JSON file per spec in torchkiln's cache)
   says which cells are already done: same digest, built, (pushed when pushing), and the image still
   in the builder that made it. Those are skipped, so a re-run rebuilds only what failed or changed.
   ``--force`` ignores the record. The engines' layer cache would make a re-run cheap too, but
   not free (a context transfer and an export per cell) and it cannot tell a pushed image apart.
4. ``schedule``: cells that share a torch layer (``torchkiln.matrix.torch_layer_key``) go to one
   builder, biggest groups first onto the least-loaded builder that can build their platform; then
   single cells move from the busiest builder to idle ones while that shortens the longest queue.
5. ``run``: per builder, ``jobs`` worker threads; a group's first cell runs before its others (they
   then find its torch layer cached). A failing cell is recorded with its error and the tail of its
   log; the others go on.
6. ``push_manifests``: with ``--push``, cells that differ only by platform get one multi-platform
   manifest list (``docker manifest create`` / ``push``, the registry's own login).

Written here rather than taken from a library: the scheduling is twenty lines over our own cell
and builder types; threads (not asyncio) because every step is a blocking subprocess.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torchkiln.building.execute import BuildSummary, execute
from torchkiln.building.invocation import BuildInvocation, BuildOptions, engine_base_digest, plan_invocation
from torchkiln.cache import kiln_cache_dir
from torchkiln.engines import MATRIX_ENGINE, BuildEvent, Engine, get_engine
from torchkiln.engines.engine import StepRecord, is_loopback, registry_failure, registry_of
from torchkiln.errors import BuildError, EngineMissingError, InputError, KilnError
from torchkiln.matrix import ResolvedCell, manifest_groups, torch_layer_key
from torchkiln.provenance import Provenance
from torchkiln.redact import redact
from torchkiln.runner import Runner

BuilderKind = Literal["host", "context", "buildx"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_SCHEMES = ("unix", "tcp", "ssh", "npipe")


@dataclass(frozen=True)
class Builder:
    """A builder as the user named it, and the environment that points the docker client at it."""

    name: str
    kind: BuilderKind
    env: Mapping[str, str]
    #: variables the docker client must not inherit (DOCKER_HOST would win over DOCKER_CONTEXT)
    unset: tuple[str, ...] = ()


def parse_builder(text: str, *, contexts: Callable[[str], bool], buildx: Callable[[str], bool] | None) -> Builder:
    """``unix:///…``/``tcp://…``/``ssh://…`` → DOCKER_HOST; a context name → DOCKER_CONTEXT; else a buildx builder.

    ``contexts(name)`` says whether a docker context of that name exists; ``buildx(name)`` whether a
    buildx builder does (None: buildx is not installed).
    """
    text = text.strip()
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme not in _SCHEMES:
            raise InputError(f"the builder {text!r} is not a Docker address ({scheme}:// is not one).",
                             hint="Give unix:///path/docker.sock, tcp://HOST:2376 (TLS through DOCKER_TLS_VERIFY/"
                                  "DOCKER_CERT_PATH, or better a docker context), ssh://USER@HOST, a docker context "
                                  "name, or a buildx builder name.")
        return Builder(text, "host", {"DOCKER_HOST": text})
    if not _NAME.match(text):
        raise InputError(f"the builder {text!r} is neither a Docker address nor a context or builder name.",
                         hint="Give unix:///…, tcp://…, ssh://…, a name from `docker context ls`, or one from "
                              "`docker buildx ls`.")
    if contexts(text):
        return Builder(text, "context", {"DOCKER_CONTEXT": text}, unset=("DOCKER_HOST",))
    if buildx is not None and buildx(text):
        return Builder(text, "buildx", {"BUILDX_BUILDER": text})
    where = "`docker context ls`" + (" or `docker buildx ls`" if buildx is not None else "")
    raise InputError(
        f"the builder {text!r} is not a docker context" + (" nor a buildx builder." if buildx is not None else
                                                           ", and buildx (for buildx builder names) is not installed."),
        hint=f"Check the name with {where}, create it (`docker context create NAME --docker host=ssh://USER@HOST`), "
             "or give the daemon's address (unix:///…, tcp://…, ssh://…).")


def builders_from(values: Sequence[str], runner: Runner, binary: str, has_buildx: bool) -> list[Builder]:
    """``--builders a,b --builders c`` → builders (contexts and buildx builders looked up by name)."""
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not names:
        raise InputError("--matrix needs at least one builder.",
                         hint="Give --builders default (this machine's docker), a docker context, a DOCKER_HOST URL "
                              "(unix:///…, tcp://…, ssh://…) or a buildx builder; repeat or comma-separate them.")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"the builder {', '.join(dupes)} is named twice.", hint="Name each builder once.")

    def is_context(name: str) -> bool:
        return runner.run([binary, "context", "inspect", name], check=False).returncode == 0

    def is_buildx(name: str) -> bool:
        return runner.run([binary, "buildx", "inspect", name], check=False).returncode == 0

    return [parse_builder(n, contexts=is_context, buildx=is_buildx if has_buildx else None) for n in names]


@dataclass
class ReadyBuilder:
    """A builder that answered: its engine (runner env pointing at it), platforms, daemon id."""

    builder: Builder
    engine: Engine
    platforms: tuple[str, ...]
    daemon: str

    @property
    def name(self) -> str:
        return self.builder.name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.builder.kind, "platforms": list(self.platforms),
                "engine": self.engine.info.to_dict()}


def connect(builders: Sequence[Builder], *, echo: Callable[[str], None] | None = None,
            emulate: bool = False) -> list[ReadyBuilder]:
    """Probe every builder (side effects: ``docker version``/``info``); refuse what cannot build."""
    ready: list[ReadyBuilder] = []
    seen: dict[str, str] = {}
    for b in builders:
        runner = Runner(echo=echo, env=dict(b.env), unset=b.unset)
        try:
            engine = get_engine(MATRIX_ENGINE, runner)
        except EngineMissingError as e:
            raise EngineMissingError(f"the builder {b.name} cannot be used: {e.message}", hint=e.hint) from None
        if b.kind == "buildx":
            if engine.info.builder != "buildx":
                raise EngineMissingError(f"the builder {b.name} is a buildx builder, but {engine.info.binary} "
                                         "builds without buildx.", hint="Install the buildx plugin.")
            r = runner.run([engine.info.binary, "buildx", "inspect", "--bootstrap", b.name], check=False,
                           what=f"docker buildx inspect {b.name}")
            m = re.search(r"^Platforms:\s*(.+)$", r.stdout, re.MULTILINE)
            if r.returncode != 0 or m is None:
                raise EngineMissingError(f"the buildx builder {b.name} did not start: {r.tail(3)}",
                                         hint=f"Check it with `docker buildx inspect --bootstrap {b.name}`.")
            platforms = tuple(p.strip().rstrip("*") for p in m.group(1).split(","))
            daemon = f"buildx:{b.name}"
        else:
            # the engine id alone is not enough: daemons of one machine share /etc/docker/key.json
            r = runner.run([engine.info.binary, "info", "--format",
                            "{{.OSType}}/{{.Architecture}} {{.ID}}|{{.Name}}|{{.DockerRootDir}}"],
                           what=f"docker info ({b.name})")
            native, _, daemon = r.stdout.strip().partition(" ")
            platforms = (_oci_platform(native),)
        if daemon in seen:
            raise InputError(f"the builders {seen[daemon]} and {b.name} are the same Docker daemon.",
                             hint="Name each machine once: a second name for one daemon adds no capacity.")
        seen[daemon] = b.name
        ready.append(ReadyBuilder(b, engine, platforms, daemon))
    return ready


def _oci_platform(native: str) -> str:
    """``linux/x86_64`` (docker info's Architecture) → ``linux/amd64``."""
    os_name, _, arch = native.partition("/")
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "amd64": "amd64"}.get(arch, arch)
    return f"{os_name or 'linux'}/{arch}"


def can_build(builder_platforms: Sequence[str], platform: str, emulate: bool) -> bool:
    return emulate or platform in builder_platforms


def check_platforms(cells: Sequence[ResolvedCell], builders: Sequence[ReadyBuilder], emulate: bool) -> None:
    """Every cell's platform needs a builder that builds it; else an error before anything builds."""
    missing = sorted({c.plan.platform for c in cells if c.plan is not None
                      and not any(can_build(b.platforms, c.plan.platform, emulate) for b in builders)})
    if missing:
        have = ", ".join(f"{b.name} ({'/'.join(b.platforms)})" for b in builders)
        raise InputError(
            f"no builder builds {', '.join(missing)}: the builders are {have}.",
            hint="Add a builder of that platform (an Arm machine's daemon for linux/arm64), or pass --emulate when "
                 "the builders run QEMU binfmt handlers (`docker run --privileged --rm tonistiigi/binfmt --install "
                 "arm64`; emulated torch installs are several times slower).")


# -- scheduling (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    cell: int  # the cell's index
    group: int  # cells with the same torch layer share a group
    platform: str


def schedule(jobs: Sequence[Job], builders: Sequence[tuple[str, tuple[str, ...]]],
             emulate: bool = False) -> dict[str, list[Job]]:
    """Jobs onto builders (see the module docstring, step 4); each queue in group order, then cell order."""
    queues: dict[str, list[Job]] = {name: [] for name, _ in builders}
    platforms = dict(builders)
    groups: dict[int, list[Job]] = {}
    for j in jobs:
        groups.setdefault(j.group, []).append(j)

    def able(job: Job) -> list[str]:
        return [n for n, _ in builders if can_build(platforms[n], job.platform, emulate)]

    for _g, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0].cell)):
        names = able(members[0])
        target = min(names, key=lambda n: (len(queues[n]), [b for b, _ in builders].index(n)))
        queues[target].extend(members)
    moved = True
    while moved:  # balance: move one cell of a group with several from the longest queue to the shortest
        moved = False
        longest = max(queues, key=lambda n: len(queues[n]))
        for job in reversed(queues[longest]):
            if sum(1 for j in queues[longest] if j.group == job.group) < 2:
                continue
            names = [n for n in able(job) if n != longest]
            if not names:
                continue
            shortest = min(names, key=lambda n: len(queues[n]))
            if len(queues[shortest]) + 1 < len(queues[longest]):
                queues[longest].remove(job)
                queues[shortest].append(job)
                moved = True
                break
    order = {j.cell: (j.group, j.cell) for j in jobs}
    group_rank = {g: i for i, (g, _) in enumerate(sorted(groups.items(), key=lambda kv: kv[1][0].cell))}
    return {n: sorted(q, key=lambda j: (group_rank[order[j.cell][0]], j.cell)) for n, q in queues.items()}


# -- planning --------------------------------------------------------------------------------------


def cell_context_dir(image: str, spec_dir: Path) -> Path:
    """A stable context folder per cell (BuildKit's context transfer stays incremental across runs)."""
    digest = hashlib.sha256(f"{spec_dir}\n{image}".encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", image.rsplit("/", 1)[-1]).strip("-")[:80]
    return kiln_cache_dir() / "contexts" / f"matrix-{name}-{digest}"


def _stat_tree(path: Path) -> list[tuple[str, int, int]]:
    if path.is_file():
        st = path.stat()
        return [(path.name, st.st_size, st.st_mtime_ns)]
    out = []
    for p in sorted(path.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            st = p.stat()
            out.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
    return out


def cell_digest(inv: BuildInvocation) -> str:
    """What a cell's image depends on (not which builder makes it): texts, copied files, tags, sources, push."""
    h = hashlib.sha256()
    d = inv.to_dict()
    for key in ("engine", "command", "env", "cwd", "writes", "scratch", "context", "files"):
        d.pop(key, None)
    # secrets by id only: their files live in the run's own scratch folder (a new path on every run)
    d["secrets"] = sorted(d.get("secrets", {}))
    h.update(json.dumps(d, sort_keys=True).encode())
    for rel, text in sorted(inv.files.texts.items()):
        h.update(f"\0{rel}\0".encode() + text.encode())
    for rel, source in sorted(inv.files.copies.items()):
        h.update(f"\0{rel}\0{_stat_tree(Path(source)) if Path(source).exists() else 'missing'}".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class PlannedCell:
    rc: ResolvedCell
    invocation: BuildInvocation
    digest: str
    group: int

    @property
    def index(self) -> int:
        return self.rc.cell.index

    @property
    def platform(self) -> str:
        return self.invocation.platform


def plan_cell(rc: ResolvedCell, spec_dir: Path, options: BuildOptions, engine: Engine, *, cwd: Path, group: int,
              env: Mapping[str, str] | None = None, provenance: Provenance | None = None,
              digest_of: Callable[[str], str] | None = None) -> PlannedCell:
    """The cell's invocation, by the one planning step every build takes (``plan_invocation``).

    A cell names its platform whatever builder makes it (``--platform`` always: a builder of another
    CPU builds it under emulation), so its invocation does not depend on the builder; the worker runs
    it with the builder's engine. ``provenance``: read once per spec; ``digest_of``: the base's digest,
    looked up once per base image.
    """
    assert rc.plan is not None
    opts = dataclasses.replace(options, tag=rc.image, context_dir=cell_context_dir(rc.image, spec_dir),
                               platform=rc.plan.platform)
    inv = plan_invocation(rc.plan, spec_dir, opts, engine, provenance=provenance or Provenance("", "", ""),
                          digest_of=digest_of, version=rc.tag, env=env, runner=engine.runner, cwd=cwd)
    return PlannedCell(rc, inv, cell_digest(inv), group)


@dataclass
class MatrixPlan:
    """Every cell planned and scheduled (``plan_matrix``): what ``--dry-run`` prints and ``run_matrix`` runs."""

    spec: Path
    builders: list[ReadyBuilder]
    #: one run per cell, in cell order: "queued" on its builder, or "skipped" (built by the last run)
    runs: list[CellRun]
    record: MatrixRecord

    @property
    def by_name(self) -> dict[str, ReadyBuilder]:
        return {b.name: b for b in self.builders}


def plan_matrix(spec: Path, image_name: str, cells: Sequence[ResolvedCell], builders: Sequence[Builder],
                options: BuildOptions, *, emulate: bool = False, force: bool = False, runner: Runner,
                env: Mapping[str, str] | None = None) -> MatrixPlan:
    """Connect the builders, plan every cell once (before anything builds), skip what the record says
    is done, and schedule the rest (the module docstring's steps 1-4). Side effects: the builders' probes."""
    ready = connect(builders, echo=runner.echo, emulate=emulate)
    check_platforms(cells, ready, emulate)
    by_name = {b.name: b for b in ready}
    keys: dict[tuple[object, ...], int] = {}
    groups = {c.cell.index: keys.setdefault(torch_layer_key(c.plan), len(keys)) for c in cells if c.plan}
    spec_dir = spec.parent.resolve() if spec.is_file() else spec.resolve()
    planner = ready[0].engine  # planning reads no daemon but the base's digest: any builder's client spells it
    digests: dict[str, str] = {}

    def digest_of(base: str) -> str:
        if base not in digests:
            digests[base] = engine_base_digest(planner, base)
        return digests[base]

    provenance = Provenance.of(spec, runner, env)
    planned = {c.cell.index: plan_cell(c, spec_dir, options, planner, cwd=Path.cwd(), group=groups[c.cell.index],
                                       env=env, provenance=provenance, digest_of=digest_of) for c in cells}
    record = MatrixRecord.for_spec(spec if spec.is_file() else spec / "kiln.toml", image_name)
    done = {} if force or options.no_cache else {i: record.done(p, by_name) for i, p in planned.items()}
    todo = [i for i in planned if not done.get(i)]
    queues = schedule([Job(i, groups[i], planned[i].platform) for i in todo],
                      [(b.name, b.platforms) for b in ready], emulate)
    runs = [CellRun(planned[job.cell], name) for name, queue in queues.items() for job in queue]
    runs += [CellRun(planned[i], holder, status="skipped") for i, holder in done.items() if holder]
    runs.sort(key=lambda r: r.index)
    return MatrixPlan(spec, ready, runs, record)


def run_matrix(mp: MatrixPlan, *, jobs: int, push: bool, runner: Runner,
               notify: Notify | None = None) -> list[ManifestResult]:
    """Build every queued cell (``run_cells``), then, with ``push``, one manifest list per platform group."""
    run_cells(mp.runs, mp.by_name, mp.record, jobs=jobs, notify=notify)
    return push_manifests(mp.runs, runner, mp.builders[0].engine.info.binary) if push else []


def matrix_failure(mp: MatrixPlan, manifests: Sequence[ManifestResult]) -> BuildError | None:
    """The error a matrix run ends with (exit 6), or None when every cell was built and every list pushed."""
    failed = [r for r in mp.runs if r.status == "failed"]
    failed_manifests = [m for m in manifests if m.status == "failed"]
    if not failed and not failed_manifests:
        return None
    names = ", ".join(f"cell {r.index} ({r.planned.rc.cell.label})" for r in failed)
    parts = [f"--- cell {r.index} on {r.builder}: {r.planned.rc.image}\n{r.log_tail()}" for r in failed]
    parts += [f"--- manifest {m.ref}: {m.reason}" for m in failed_manifests]
    what = f"{len(failed)} of {len(mp.runs)} cells failed: {names}" if failed else "the builds succeeded"
    if failed_manifests:
        what += f"; {len(failed_manifests)} manifest list(s) could not be pushed"
    return BuildError(
        what + ".",
        hint=f"Fix what the log tails below show, then run the same command again: only the failed cells are "
             f"rebuilt (--force rebuilds all). `kiln build {mp.spec} --matrix … --debug` shows every command.",
        details="\n".join(parts),
    )


# -- the record of earlier runs ------------------------------------------------------------------------


@dataclass
class MatrixRecord:
    """The outcome of each cell's last build, by image reference (a JSON file in torchkiln's cache)."""

    path: Path
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_spec(cls, spec_path: Path, image_name: str) -> MatrixRecord:
        digest = hashlib.sha256(str(spec_path.resolve()).encode()).hexdigest()[:10]
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", image_name).strip("-")
        path = kiln_cache_dir() / "matrix" / f"{name}-{digest}.json"
        cells: dict[str, dict[str, Any]] = {}
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and isinstance(data.get("cells"), dict):
                cells = {k: v for k, v in data["cells"].items() if isinstance(v, dict)}
        except (OSError, ValueError):
            pass  # no record (or a damaged one): every cell is built
        return cls(path, cells)

    def done(self, cell: PlannedCell, builders: Mapping[str, ReadyBuilder]) -> str | None:
        """The builder that holds this cell's image when the last build of the same digest succeeded."""
        entry = self.cells.get(cell.rc.image)
        if not entry or entry.get("status") != "built" or entry.get("digest") != cell.digest:
            return None
        builder = builders.get(str(entry.get("builder")))
        if builder is None:  # that builder is not in this pool: only a pushed image can be trusted
            return str(entry.get("builder")) if entry.get("pushed") else None
        try:
            if builder.engine.inspect_image(cell.rc.image).id != entry.get("image_id"):
                return None
        except KilnError:
            return None
        return builder.name

    def update(self, image: str, entry: dict[str, Any]) -> None:
        with self.lock:
            self.cells[image] = entry
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"cells": self.cells}, indent=1, sort_keys=True))
            os.replace(tmp, self.path)


# -- running ---------------------------------------------------------------------------------------

CellStatus = Literal["queued", "building", "built", "failed", "skipped"]


@dataclass
class CellRun:
    """What happened to one cell (updated by its worker thread; read by the display)."""

    planned: PlannedCell
    builder: str
    status: CellStatus = "queued"
    step: str = ""
    started: float | None = None
    seconds: float = 0.0
    summary: BuildSummary | None = None
    error: KilnError | None = None

    @property
    def index(self) -> int:
        return self.planned.index

    def log_tail(self, lines: int = 15) -> str:
        if self.error is None:
            return ""
        text = "\n".join(x for x in (self.error.message, self.error.details or "") if x)
        return redact("\n".join(text.splitlines()[-lines:]))

    def to_dict(self) -> dict[str, Any]:
        rc = self.planned.rc
        d: dict[str, Any] = {
            "cell": rc.cell.index, "label": rc.cell.label, "values": rc.cell.to_dict(), "image": rc.image,
            "builder": self.builder, "status": self.status, "seconds": round(self.seconds, 2),
            "digest": self.planned.digest,
        }
        if self.summary is not None:
            s = self.summary
            d.update(image_id=s.image_id, size_bytes=s.size_bytes, cache_hits=s.cache_hits,
                     cache_misses=s.cache_misses, pushed=s.pushed)
        if self.error is not None:
            d["error"] = {**self.error.to_dict(), "log_tail": self.log_tail()}
        return d


Notify = Callable[[CellRun], None]


class _Queue:
    """One builder's cells; a group's first cell runs before the group's others (torch layer cached)."""

    def __init__(self, runs: Sequence[CellRun]) -> None:
        self.pending = list(runs)
        self.warm: set[int] = set()
        self.first: set[int] = set()
        self.cond = threading.Condition()

    def take(self) -> tuple[CellRun, bool] | None:
        with self.cond:
            while self.pending:
                for run in self.pending:
                    g = run.planned.group
                    if g in self.warm or g not in self.first:
                        self.pending.remove(run)
                        first = g not in self.warm and g not in self.first
                        if first:
                            self.first.add(g)
                        return run, first
                self.cond.wait()
            return None

    def finished(self, run: CellRun, first: bool) -> None:
        with self.cond:
            if first:
                self.warm.add(run.planned.group)
                self.first.discard(run.planned.group)
            self.cond.notify_all()


def run_cells(runs: Sequence[CellRun], builders: Mapping[str, ReadyBuilder], record: MatrixRecord, *, jobs: int = 1,
              notify: Notify | None = None) -> None:
    """Build every queued run on its builder, ``jobs`` at a time per builder; failures are recorded, not raised."""
    threads = []
    for name, builder in builders.items():
        queue = _Queue([r for r in runs if r.builder == name and r.status == "queued"])
        for _ in range(max(1, jobs)):
            t = threading.Thread(target=_worker, args=(queue, builder, record, notify), daemon=True,
                                 name=f"kiln-{name}")
            t.start()
            threads.append(t)
    for t in threads:
        t.join()


def _worker(queue: _Queue, builder: ReadyBuilder, record: MatrixRecord, notify: Notify | None) -> None:
    while (item := queue.take()) is not None:
        run, first = item
        try:
            _build_one(run, builder, record, notify)
        finally:
            queue.finished(run, first)


def _build_one(run: CellRun, builder: ReadyBuilder, record: MatrixRecord, notify: Notify | None) -> None:
    run.status, run.started = "building", time.monotonic()
    if notify:
        notify(run)

    def progress(ev: BuildEvent) -> None:
        if ev.line is None and ev.status == "running" and ev.stage not in ("internal", "export", "auth", ""):
            run.step = f"[{ev.stage}] {StepRecord(ev.step, ev.stage, ev.name).label}"[:90]

    inv = run.planned.invocation
    try:
        run.summary = execute(inv, builder.engine, progress=progress)
        run.status = "built"
    except KilnError as e:
        run.error, run.status = e, "failed"
    except Exception as e:  # noqa: BLE001 - one cell's surprise must not stop the others
        run.error, run.status = KilnError(f"{type(e).__name__}: {e}"), "failed"
    run.seconds = time.monotonic() - run.started
    run.step = ""
    entry: dict[str, Any] = {"digest": run.planned.digest, "builder": builder.name, "status": run.status,
                             "seconds": round(run.seconds, 2), "finished": time.time()}
    if run.summary is not None:
        entry.update(image_id=run.summary.image_id, pushed=run.summary.pushed)
    if run.error is not None:
        entry["error"] = redact(run.error.message)
    record.update(run.planned.rc.image, entry)
    if notify:
        notify(run)


# -- multi-platform manifests ----------------------------------------------------------------------


def manifest_commands(binary: str, ref: str, images: Sequence[str]) -> list[list[str]]:
    """``docker manifest create`` + ``push`` for ``ref`` (pure).

    ``--insecure`` only for a loopback registry: the daemon treats 127.0.0.0/8 as an insecure (plain
    HTTP) registry on its own, the ``docker manifest`` client does not.
    """
    insecure = ["--insecure"] if is_loopback(registry_of(ref)) else []
    return [[binary, "manifest", "create", "--amend", *insecure, ref, *images],
            [binary, "manifest", "push", "--purge", *insecure, ref]]


@dataclass(frozen=True)
class ManifestResult:
    ref: str
    images: tuple[str, ...]
    status: Literal["pushed", "skipped", "failed"]
    digest: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"manifest": self.ref, "images": list(self.images), "status": self.status, "digest": self.digest,
                "reason": self.reason}


def push_manifests(runs: Sequence[CellRun], runner: Runner, binary: str) -> list[ManifestResult]:
    """One manifest list per platform group whose cells are all pushed; the others are skipped with why."""
    by_image = {r.planned.rc.image: r for r in runs}
    out: list[ManifestResult] = []
    for ref, cells in manifest_groups([r.planned.rc for r in runs]).items():
        images = tuple(c.image for c in cells)
        not_pushed = [i for i in images if by_image[i].status not in ("built", "skipped")]
        if not_pushed:
            out.append(ManifestResult(ref, images, "skipped", reason=f"not built: {', '.join(not_pushed)}"))
            continue
        env = {"DOCKER_CLI_EXPERIMENTAL": "enabled"}
        digest, reason = "", ""
        for argv in manifest_commands(binary, ref, images):
            r = runner.run(argv, env=env, check=False, what=f"docker {argv[1]} {argv[2]}")
            if r.returncode != 0:
                err = registry_failure(MATRIX_ENGINE, ref, r)
                reason = err.message if err is not None else r.tail(3)
                break
            digest = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        out.append(ManifestResult(ref, images, "failed" if reason else "pushed", digest if not reason else "",
                                  redact(reason)))
    return out


