#!/usr/bin/env python3
"""Build the same workload five ways in one run, against the machine's floor, and compare them.

Approaches (all on the same engine, the same offline Debian bookworm base and the same package
sources, in one run so that machine load affects them alike):

- ``torchkiln``: the Dockerfile ``kiln build`` renders (uv, a torch layer of its own, a slim runtime);
- ``naive``: one stage, the app copied first, ``pip install`` leaving pip's cache in the layer;
- ``twostage``: a conventional two-stage Dockerfile (``pip install --prefix`` in a builder with a
  pip cache mount, the result copied into a runtime stage, the app copied last);
- ``hpccm``: an hpc-container-maker recipe (``bench/hpccm_recipe.py``) rendered to a Dockerfile;
- ``uvexpert``: the Dockerfile an expert writes today from uv's Docker integration guide
  (https://docs.astral.sh/uv/guides/integration/docker/, the guide as of uv 0.13.x; uv 0.13.9 used
  here): uv mounted only while it runs ("Using uv temporarily"), a cache mount with
  ``UV_LINK_MODE=copy`` ("Caching"), ``UV_COMPILE_BYTECODE=1`` ("Compiling bytecode"), the pip
  interface into ``/opt/venv`` ("Using the pip interface"), a builder stage whose venv is copied
  into the final stage ("Non-editable installs": copy the environment, not the source), app last
  ("Intermediate layers"). Its package sources reach uv as configuration: a ``uv.toml`` passed as a
  build secret and mounted at ``/etc/uv/uv.toml`` (uv's system configuration file);
- ``floor`` (``bench/floor.py``): no engine at all, the unavoidable work of this machine: unpack the
  same wheels, write the ``.pyc`` a container needs, tar + sha256 the tree once. Every approach is
  reported as a multiple of it.

Scenarios: cold build (no layer cache, empty package caches), rebuild after editing one app file,
rebuild after adding one small pip package, image size against its floor (base image + installed
packages + app), and the time a fresh container takes to ``import torch``.

Fairness: every approach gets the same sources (``--sources-from-pip`` style: this machine's pip
configuration, or the ``KILN_*`` variables), local folders served over HTTP on 127.0.0.1 with host
networking, and the CA bundle as a build secret. pip-based approaches run on the same base plus
Debian's ``python3-pip`` (made with ``kiln base bootstrap --package python3-pip``), as a pip user
would start from an image that has pip. Cold builds use ``--no-cache`` and a cache-mount id unique
to the run, so no earlier build's package cache helps.

Usage: python bench/bench_build.py [--workload cpu|cu130] [--approaches torchkiln,naive,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from torchkiln.building import sources as src
from torchkiln.building.bootstrap import BaseRequest, bootstrap
from torchkiln.engines import Engine, get_engine
from torchkiln.engines.engine import BuildOutcome
from torchkiln.errors import KilnError
from torchkiln.building.context import find_uv, write_context
from torchkiln.load import load_plan
from torchkiln.runner import Runner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floor  # noqa: E402  (bench/floor.py, beside this script)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
APPROACHES = ("floor", "torchkiln", "torchkiln-before", "uvexpert", "naive", "twostage", "hpccm")
#: ``torchkiln-before``: the Dockerfile the renderer made before issue 17's changes (main at d83074b, the
#: golden file of examples/cpu.toml kept in bench/baselines/), built from the same context as ``torchkiln``
#: so that before and after are measured in one run
BEFORE = ROOT / "bench" / "baselines" / "torchkiln-d83074b.{workload}.Dockerfile"
#: the approaches that build an image (the floor builds none)
IMAGES = tuple(a for a in APPROACHES if a != "floor")


@dataclass(frozen=True)
class Workload:
    name: str
    spec: str
    extra_package: str  # the "one small pip package" added in the add-package scenario


WORKLOADS = {
    "cpu": Workload("cpu", "cpu.toml", "idna"),
    "cu130": Workload("cu130", "cu130-hopper.toml", "idna"),
}


def rebuilt_steps(out: BuildOutcome) -> list[str]:
    """The instructions a rebuild ran again (not taken from the cache), FROM lines aside."""
    return [s.title for s in out.steps if s.is_instruction and s.status == "done" and not s.name.startswith("FROM")]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the baselines' Dockerfiles ----------------------------------------------------------------------

PIP_MOUNTS = (
    "--mount=type=secret,id=pip-conf,target=/etc/pip.conf "
    "--mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca"
)


def naive_dockerfile(base: str, app_cmd: list[str]) -> str:
    return f"""\
FROM {base}
WORKDIR /workspace
COPY . /workspace/
RUN {PIP_MOUNTS} pip3 install -r /workspace/requirements.txt
CMD {json.dumps(app_cmd)}
"""


def twostage_dockerfile(base: str, app: list[str], app_cmd: list[str], cache_id: str) -> str:
    copies = "\n".join(f"COPY {p} /workspace/{p}" for p in app)
    return f"""\
FROM {base} AS builder
COPY requirements.txt /tmp/requirements.txt
RUN {PIP_MOUNTS} --mount=type=cache,id={cache_id}-pip,target=/root/.cache/pip \\
    pip3 install --prefix=/install -r /tmp/requirements.txt

FROM {base}
COPY --from=builder /install/ /usr/
WORKDIR /workspace
{copies}
CMD {json.dumps(app_cmd)}
"""


def hpccm_dockerfile(base: str, requirements: Path, app: list[str]) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "hpccm.cli", "--recipe", str(ROOT / "bench" / "hpccm_recipe.py"), "--format", "docker",
         "--userarg", f"base={base}", f"requirements={requirements}", f"app={','.join(app)}"],
        check=True, capture_output=True, text=True,
    )
    text = r.stdout
    # harness plumbing only: give hpccm's pip step the same package sources as every other approach
    return re.sub(r"^RUN pip3 ", f"RUN {PIP_MOUNTS} pip3 ", text, flags=re.M)


def uvexpert_dockerfile(base: str, app: list[str], app_cmd: list[str], cache_id: str, ca: bool) -> str:
    """uv's Docker guide, pip interface (the workload is a requirements list, not a uv project)."""
    copies = "\n".join(f"COPY {p} /workspace/{p}" for p in app)
    cert = "SSL_CERT_FILE=/run/secrets/kiln-ca " if ca else ""
    return f"""\
FROM {base} AS builder
ENV UV_LINK_MODE=copy \\
    UV_COMPILE_BYTECODE=1 \\
    UV_PYTHON_DOWNLOADS=never
RUN --mount=type=bind,source=uv,target=/bin/uv \\
    uv venv /opt/venv
RUN --mount=type=cache,id={cache_id}-uv,target=/root/.cache/uv \\
    --mount=type=bind,source=uv,target=/bin/uv \\
    --mount=type=bind,source=requirements.txt,target=/tmp/requirements.txt \\
    --mount=type=secret,id=uv-conf,target=/etc/uv/uv.toml \\
    --mount=type=secret,id=kiln-ca,target=/run/secrets/kiln-ca \\
    {cert}uv pip install --python /opt/venv/bin/python -r /tmp/requirements.txt

FROM {base}
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \\
    VIRTUAL_ENV=/opt/venv
WORKDIR /workspace
{copies}
CMD {json.dumps(app_cmd)}
"""


# -- package sources for pip ---------------------------------------------------------------------------


@contextmanager
def pip_sources(sources: src.Sources, ca: Path | None) -> Iterator[dict[str, Path]]:
    """Serve local folders over HTTP, write a pip.conf and a uv.toml; yields the secrets for pip and uv builds."""
    servers: dict[Path, src.LocalIndexServer] = {}

    def url_for(location: str, *, index: bool) -> str:
        folder = src.local_folder(location)
        if folder is None:
            return location
        folder = folder.resolve()
        root = folder.parent
        if root not in servers:
            servers[root] = src.LocalIndexServer(root)
        return f"{servers[root].url}/{folder.name}/"

    try:
        lines = ["[global]", "break-system-packages = true", "disable-pip-version-check = true"]
        if sources.index_url:
            lines.append(f"index-url = {url_for(sources.index_url, index=True)}")
        extras = ([sources.torch_index] if sources.torch_index else []) + list(sources.extra_index_urls)
        if extras:
            lines.append("extra-index-url = " + " ".join(url_for(u, index=True) for u in extras))
        if sources.find_links:
            lines.append("find-links = " + " ".join(url_for(u, index=False) for u in sources.find_links))
        if ca:
            lines.append("cert = /run/secrets/kiln-ca")
        uv_toml = src.render_uv_toml(
            index_url=url_for(sources.index_url, index=True) if sources.index_url else None,
            extra_index_urls=[url_for(u, index=True) for u in extras],
            find_links=[url_for(u, index=False) for u in sources.find_links],
            index_strategy=sources.index_strategy,
        )
        with tempfile.TemporaryDirectory(prefix="bench-pip-") as tmp:
            conf = Path(tmp) / "pip.conf"
            conf.write_text("\n".join(lines) + "\n")
            (Path(tmp) / "uv.toml").write_text(uv_toml)
            secrets = {"pip-conf": conf, "uv-conf": Path(tmp) / "uv.toml"}
            if ca:
                secrets["kiln-ca"] = ca
            yield secrets
    finally:
        for s in servers.values():
            s.close()


# -- measurements ------------------------------------------------------------------------------------

SIZE_SCRIPT = r"""
import json, os, site, sys, sysconfig
dirs = set(site.getsitepackages()) | {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
total = 0
for d in sorted(dirs):
    for root, _dirs, files in os.walk(d):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
print(json.dumps({"site_bytes": total, "dirs": sorted(dirs)}))
"""

IMPORT_SCRIPT = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"


def site_bytes(engine: Engine, image: str) -> int:
    r = engine.run(image, ["-c", SIZE_SCRIPT], entrypoint="python3", user="0", check=True)
    return int(json.loads(r.stdout.strip().splitlines()[-1])["site_bytes"])


def import_once(engine: Engine, image: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """One fresh container: the time ``import torch`` takes inside it, and the container's wall time."""
    start = time.monotonic()
    r = engine.run(image, ["python3", "-c", IMPORT_SCRIPT], env=env, check=True)
    return float(r.stdout.strip().splitlines()[-1]), time.monotonic() - start


def spread(samples: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(samples), 3), "min": round(min(samples), 3),
            "max": round(max(samples), 3)}


def _ratio(a: float, b: float, digits: int = 2) -> float | None:
    """a / b, or None where a scenario was not run."""
    return round(a / b, digits) if a and b else None


@dataclass
class Result:
    approach: str
    image: str
    base: str
    cold_s: float = 0.0
    app_edit_s: float = 0.0
    add_package_s: float = 0.0
    size_bytes: int = 0
    floor_bytes: int = 0
    import_s: float = 0.0
    container_s: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def overhead_pct(self) -> float:
        return 100.0 * (self.size_bytes - self.floor_bytes) / self.floor_bytes if self.floor_bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["overhead_pct"] = round(self.overhead_pct, 2)
        for k in ("cold_s", "app_edit_s", "add_package_s", "import_s", "container_s"):
            d[k] = round(d[k], 3)
        return d


# -- the run ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.runner = Runner()
        self.engine = get_engine(args.engine, self.runner)
        self.workload = WORKLOADS[args.workload]
        self.run_id = f"bench-{os.getpid()}-{int(time.time())}"
        self.round = 0  # cold-build round: each one gets context folders and cache-mount ids of its own
        self.built: set[str] = set()  # every image id this run made (removed by cleanup)
        self.work = Path(tempfile.mkdtemp(prefix=f"kiln-bench-{args.workload}-"))
        self.spec = self.work / "spec" / self.workload.spec
        self.spec.parent.mkdir(parents=True)
        shutil.copy2(EXAMPLES / self.workload.spec, self.spec)
        shutil.copytree(EXAMPLES / "apps", self.spec.parent / "apps")
        env_set = any(os.environ.get(v) for v in ("KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS"))
        self.sources = src.resolve_sources(from_pip=not env_set, runner=self.runner, spec_dir=self.spec.parent)
        self.ca = Path(self.sources.ca_bundle) if self.sources.ca_bundle else None
        log(f"engine {self.engine.info.name} {self.engine.info.server_version} ({self.engine.info.builder}); "
            f"work folder {self.work}")

    @property
    def cache_id(self) -> str:
        return f"{self.run_id}-r{self.round}"

    # bases
    def bases(self) -> tuple[str, str]:
        kiln = bootstrap(self.engine, BaseRequest(), runner=self.runner).image
        pip = bootstrap(self.engine, BaseRequest(packages=("python3", "python3-pip")), runner=self.runner).image
        return kiln, pip

    # torchkiln: the real renderer and sources; only the uv cache-mount id is made unique to this run
    def torchkiln_build(self, base: str, tag: str, *, no_cache: bool = False,
                        before: bool = False) -> tuple[float, BuildOutcome]:
        _spec, plan, spec_dir = load_plan(self.spec)
        plan = dataclasses.replace(plan, base_image=base)
        name = "torchkiln-before" if before else "torchkiln"
        ctx = self.work / f"ctx-{name}-{self.round}"  # a new folder: BuildKit has none of it yet
        start = time.monotonic()
        write_context(plan, spec_dir, ctx)
        df = ctx / "Dockerfile"
        text = df.read_text()
        if before:  # the earlier renderer's text for the same plan: only the base (and the added packages) differ
            old = BEFORE.with_name(BEFORE.name.format(workload=self.workload.name)).read_text()
            text = re.sub(r"^FROM \S+ AS base$", f"FROM {base} AS base", old, count=1, flags=re.M)
        for target in ("/root/.cache/uv", "/var/cache/apt", "/var/lib/apt/lists"):
            cache_id = f"{self.cache_id}{name}{target}"
            text = text.replace(f"type=cache,target={target}", f"type=cache,id={cache_id},target={target}")
        df.write_text(text)
        with src.prepare(self.sources, ctx) as prepared:
            out = self.engine.build(ctx, df, target="runtime", secrets=prepared.secrets,
                                    network=prepared.network, no_cache=no_cache)
        self.engine.tag(out.image_id, tag)
        self.built.add(out.image_id)
        return time.monotonic() - start, out

    def floor_inputs(self) -> floor.FloorInputs:
        """Resolve the workload's wheels from the same sources (local folders read directly), untimed."""
        _spec, plan, _ = load_plan(self.spec)
        reqs, _, _ = self.requirements()
        s = self.sources
        uv_toml = src.render_uv_toml(
            index_url=s.index_url,
            extra_index_urls=[u for u in ((s.torch_index,) if s.torch_index else ()) + s.extra_index_urls],
            find_links=list(s.find_links),
            index_strategy=s.index_strategy,
        )
        return floor.prepare(reqs, uv_toml, list(plan.precompile), self.work / "floor")

    def requirements(self) -> tuple[list[str], list[str], list[str]]:
        _spec, plan, _ = load_plan(self.spec)
        reqs = [plan.torch.requirement, *plan.torch.companions, *plan.pip_packages]
        return reqs, list(plan.app.copy), ["python3", *plan.app.command[1:]] if plan.app.command else ["python3"]

    def baseline_context(self, approach: str, base: str) -> tuple[Path, Path]:
        reqs, app, cmd = self.requirements()
        ctx = self.work / f"ctx-{approach}"
        if ctx.exists():
            shutil.rmtree(ctx)
        ctx.mkdir()
        (ctx / "requirements.txt").write_text("\n".join(reqs) + "\n")
        for p in app:
            (ctx / p).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.spec.parent / p, ctx / p)
        if approach == "naive":
            text = naive_dockerfile(base, cmd)
        elif approach == "uvexpert":
            shutil.copy2(find_uv(), ctx / "uv")
            text = uvexpert_dockerfile(base, app, cmd, self.cache_id, self.ca is not None)
        elif approach == "twostage":
            text = twostage_dockerfile(base, app, cmd, self.cache_id)
        else:
            text = hpccm_dockerfile(base, ctx / "requirements.txt", app)
        (ctx / "Dockerfile").write_text(text)
        return ctx, ctx / "Dockerfile"

    def baseline_build(self, approach: str, base: str, tag: str, secrets: dict[str, Path], *,
                       no_cache: bool = False, fresh: bool = False) -> tuple[float, BuildOutcome]:
        ctx = self.work / f"ctx-{approach}"
        if fresh or not ctx.exists():
            self.baseline_context(approach, base)
        start = time.monotonic()
        out = self.engine.build(ctx, ctx / "Dockerfile", secrets=secrets, network="host", no_cache=no_cache)
        self.engine.tag(out.image_id, tag)
        self.built.add(out.image_id)
        return time.monotonic() - start, out

    def edit_app(self) -> None:
        _, app, _ = self.requirements()
        for root in [self.spec.parent, *(self.work / f"ctx-{a}" for a in IMAGES if not a.startswith("torchkiln"))]:
            f = root / app[0]
            if f.exists():
                f.write_text(f.read_text() + f"\n# edited by the benchmark at {time.time()}\n")

    def add_package(self) -> None:
        # a specifier unique to the run (it excludes a version that does not exist): the engines' layer
        # caches outlive a run, and an earlier run's layer for the very same pip line would be reused
        pkg = f"{self.workload.extra_package}!=0.0.{int(time.time())}"
        data = tomllib.loads(self.spec.read_text())
        old = data.get("packages", {}).get("pip", [])
        text = self.spec.read_text()
        if old:
            text = text.replace(f"pip = {json.dumps(old)}", f"pip = {json.dumps([*old, pkg])}")
        else:
            text += f'\n[packages]\npip = ["{pkg}"]\n'
        self.spec.write_text(text)
        assert pkg in tomllib.loads(text)["packages"]["pip"], "could not add the package to the spec"
        for a in IMAGES:
            req = self.work / f"ctx-{a}" / "requirements.txt"
            if req.exists():
                req.write_text(req.read_text() + pkg + "\n")
        hp = self.work / "ctx-hpccm"
        if hp.exists():  # an hpccm user re-runs hpccm: its Dockerfile names the packages
            _, app, _ = self.requirements()
            (hp / "Dockerfile").write_text(hpccm_dockerfile(self.hpccm_base, hp / "requirements.txt", app))

    def run(self) -> dict[str, Any]:
        kiln_base, pip_base = self.bases()
        self.hpccm_base = pip_base
        approaches = [a for a in APPROACHES if a in self.args.approaches.split(",")]
        results = {
            a: Result(a, f"kiln-bench/{self.workload.name}-{a}:latest",
                      kiln_base if a in ("torchkiln", "torchkiln-before", "uvexpert") else pip_base)
            for a in approaches
        }
        images = [a for a in approaches if a != "floor"]
        floor_in = self.floor_inputs() if "floor" in approaches else None
        floor_runs: list[dict[str, Any]] = []
        with pip_sources(self.sources, self.ca) as pip_secrets:

            def build(a: str, **kw: Any) -> tuple[float, BuildOutcome]:
                r = results[a]
                if a in ("torchkiln", "torchkiln-before"):
                    return self.torchkiln_build(r.base, r.image, before=a == "torchkiln-before", **kw)
                return self.baseline_build(a, r.base, r.image, pip_secrets, **kw)

            samples: dict[str, list[tuple[float, BuildOutcome]]] = {a: [] for a in images}
            order = list(approaches)
            for rnd in range(self.args.repeat):  # rounds alternate the approaches: load hits all alike
                self.round = rnd
                for a in order:
                    log(f"{a}: cold build, round {rnd + 1} of {self.args.repeat}")
                    if a == "floor":
                        assert floor_in is not None
                        floor_runs.append({**floor.measure(floor_in, self.work), "loadavg": os.getloadavg()[0]})
                        continue
                    samples[a].append(build(a, no_cache=True, **({} if a.startswith("torchkiln") else {"fresh": True})))
                order = order[1:] + order[:1]  # rotate: no approach always runs first (or right after another)
                if self.args.out:  # every round's samples on disk at once: a long run cut short keeps them
                    partial = {a: [round(x, 3) for x, _ in samples[a]] for a in images}
                    partial["floor"] = [f["floor_s"] for f in floor_runs]
                    self.args.out.with_suffix(".partial.json").write_text(json.dumps(
                        {"rounds_done": rnd + 1, "cold_samples_s": partial, "floor_runs": floor_runs,
                         "steps": {a: [[s.to_dict() for s in out.steps] for _, out in samples[a]] for a in images},
                         "loadavg": os.getloadavg()}, indent=1) + "\n")
            if floor_runs:
                ordered_f = sorted(floor_runs, key=lambda x: x["floor_s"])
                results["floor"].cold_s = ordered_f[(len(ordered_f) - 1) // 2]["floor_s"]
                results["floor"].notes["cold_samples_s"] = [f["floor_s"] for f in floor_runs]
                results["floor"].notes["runs"] = floor_runs
            for a in images:
                ordered = sorted(samples[a], key=lambda x: x[0])
                secs, out = ordered[(len(ordered) - 1) // 2]  # the median build (the lower one of an even count)
                results[a].cold_s = secs
                results[a].notes["cold_steps"] = [s.to_dict() for s in out.steps]
                results[a].notes["cold_export_s"] = sum(s.seconds or 0 for s in out.steps if s.stage == "export")
                results[a].notes["cold_samples_s"] = [round(x, 3) for x, _ in samples[a]]
            self.edit_app()
            for a in images if "edit" in self.args.scenarios else ():
                log(f"{a}: rebuild after an app edit")
                results[a].app_edit_s, out = build(a)
                # the engine's own time (the build command), beside the whole rebuild above, which for
                # torchkiln also renders and writes its context and starts the source servers
                results[a].notes["app_edit_engine_s"] = round(out.seconds, 3)
                results[a].notes["app_edit_rebuilt"] = rebuilt_steps(out)
            imports: dict[str, list[tuple[float, float]]] = {a: [] for a in images}
            for _ in range(self.args.import_runs):  # fresh containers, the images alternating
                for a in images:
                    imports[a].append(import_once(self.engine, results[a].image))
            for a in images:
                r = results[a]
                log(f"{a}: size and import time")
                r.size_bytes = self.engine.inspect_image(r.image).size
                base_size = self.engine.inspect_image(r.base).size
                installed = site_bytes(self.engine, r.image) - site_bytes(self.engine, r.base)
                _, app, _ = self.requirements()
                app_bytes = sum((self.spec.parent / p).stat().st_size for p in app)
                r.floor_bytes = base_size + installed + app_bytes
                r.notes.update(base_bytes=base_size, installed_bytes=installed, app_bytes=app_bytes)
                r.import_s = statistics.median(x for x, _ in imports[a])
                r.container_s = statistics.median(w for _, w in imports[a])
                r.notes["import_samples_s"] = [round(x, 3) for x, _ in imports[a]]
                r.notes["import_spread_s"] = spread([x for x, _ in imports[a]])
                if a == "torchkiln":  # the same image with its bytecode ignored: what it buys
                    nopyc = [import_once(self.engine, r.image, env={"PYTHONPYCACHEPREFIX": "/tmp/kiln-bench-nopyc"})[0]
                             for _ in range(3)]
                    r.notes["import_without_bytecode_s"] = round(statistics.median(nopyc), 3)
                    pyc = self.engine.run(r.image, ["sh", "-c", "find /opt/venv -name '*.pyc' | wc -l"], check=True)
                    r.notes["pyc_files"] = int(pyc.stdout.strip().splitlines()[-1])
            self.add_package()
            for a in images if "add" in self.args.scenarios else ():
                log(f"{a}: rebuild after adding {self.workload.extra_package}")
                results[a].add_package_s, out = build(a)
                results[a].notes["add_package_engine_s"] = round(out.seconds, 3)
                results[a].notes["add_package_rebuilt"] = rebuilt_steps(out)
        if "torchkiln" in approaches and "edit" in self.args.scenarios and self.args.cli_rebuild:
            results["torchkiln"].notes["kiln_build_cli_app_edit_s"] = self.cli_rebuild(kiln_base)
        if "torchkiln" in approaches:
            probe = ["python3", "-c", "import torch; print(torch.version.cuda)"]
            r = self.engine.run(results["torchkiln"].image, probe)
            results["torchkiln"].notes["torch_version_cuda"] = r.stdout.strip().splitlines()[-1]
        return self.report(results)

    def cli_rebuild(self, base: str) -> float:
        """`kiln build` end to end (a new process, real cache ids) after an app edit, warm cache."""
        cmd = [sys.executable, "-m", "torchkiln", "build", str(self.spec), "--base", base, "--engine",
               self.engine.name, "--tag", f"kiln-bench/{self.workload.name}-cli:latest", "--json"]
        if not any(os.environ.get(v) for v in ("KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS")):
            cmd.append("--sources-from-pip")
        subprocess.run(cmd, check=True, capture_output=True)  # warm the real cache ids once
        self.edit_app()
        start = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True)
        return round(time.monotonic() - start, 3)

    def report(self, results: dict[str, Result]) -> dict[str, Any]:
        naive = results.get("naive")
        fl = results.get("floor")
        ux = results.get("uvexpert")
        rows = []
        print(f"\nworkload {self.workload.name} · {self.engine.info.name} {self.engine.info.server_version} "
              f"({self.engine.info.builder}) · {os.cpu_count()} CPUs · load average now "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"{'approach':<10} {'cold s':>7} {'min-max':>12} {'× floor':>8} {'× uvexpert':>10} {'app edit s':>10} "
              f"{'add pkg s':>9} {'size MB':>8} {'import s':>8} {'min-max':>11}")
        for r in results.values():
            cs = r.notes.get("cold_samples_s") or [r.cold_s]
            imp = r.notes.get("import_spread_s")
            vs_floor = _ratio(r.cold_s, fl.cold_s) if fl else None
            vs_ux = _ratio(r.cold_s, ux.cold_s) if ux else None
            r.notes["cold_spread_s"] = spread(cs)
            imp_range = f"{imp['min']:.2f}-{imp['max']:.2f}" if imp else ""
            r.notes["cold_x_floor"] = vs_floor
            r.notes["cold_x_uvexpert"] = vs_ux
            print(f"{r.approach:<10} {r.cold_s:7.1f} {min(cs):5.1f}-{max(cs):<6.1f} "
                  f"{'-' if vs_floor is None else f'{vs_floor:.2f}':>8} {'-' if vs_ux is None else f'{vs_ux:.2f}':>10} "
                  f"{r.app_edit_s:10.2f} {r.add_package_s:9.1f} {r.size_bytes / 1e6:8.0f} {r.import_s:8.2f} "
                  f"{imp_range:>11}")
            rows.append(r.to_dict())
        per_round: dict[str, list[float | None]] = {}
        if fl is not None:
            fs = fl.notes.get("cold_samples_s", [])
            print("\nper round, × the floor of the same round:")
            for r in results.values():
                if r.approach == "floor":
                    continue
                cs = r.notes.get("cold_samples_s", [])
                per_round[r.approach] = [_ratio(c, f) for c, f in zip(cs, fs)]
                print(f"  {r.approach:<10} " + "  ".join(f"×{x}" for x in per_round[r.approach]))
        ratios: dict[str, dict[str, float | None]] = {}
        if naive is not None:
            print("\nratios (naive / approach; > 1 means faster or smaller than naive):")
            for r in results.values():
                if r.approach == "floor":
                    continue
                ratios[r.approach] = {
                    "cold": _ratio(naive.cold_s, r.cold_s),
                    "app_edit": _ratio(naive.app_edit_s, r.app_edit_s),
                    "add_package": _ratio(naive.add_package_s, r.add_package_s),
                    "size": _ratio(naive.size_bytes, r.size_bytes, 3),
                    "import": _ratio(naive.import_s, r.import_s, 3),
                }
                q = ratios[r.approach]
                shown = {k: "-" if v is None else str(v) for k, v in q.items()}
                print(f"  {r.approach:<10} cold ×{shown['cold']:<6} app edit ×{shown['app_edit']:<7} "
                      f"add package ×{shown['add_package']:<6} size ×{shown['size']:<6} import ×{shown['import']}")
        targets: dict[str, dict[str, Any]] = {}
        tk = results.get("torchkiln")
        if tk is not None:
            anchors = {a: results[a].cold_s for a in ("hpccm", "twostage", "uvexpert") if a in results}
            fastest = min(anchors, key=anchors.__getitem__) if anchors else None
            two = results.get("twostage")
            targets["torchkiln"] = {
                "fastest_anchor": fastest,
                "cold_vs_fastest_anchor": _ratio(anchors[fastest], tk.cold_s) if fastest else None,
                "cold_vs_uvexpert": _ratio(ux.cold_s, tk.cold_s) if ux else None,
                "cold_x_floor": _ratio(tk.cold_s, fl.cold_s) if fl else None,
                "app_edit_build_s": round(tk.app_edit_s, 3),
                "app_edit_engine_s": tk.notes.get("app_edit_engine_s"),
                "app_edit_kiln_cli_s": tk.notes.get("kiln_build_cli_app_edit_s"),
                "add_package_vs_twostage": _ratio(two.add_package_s, tk.add_package_s) if two else None,
                "overhead_pct": round(tk.overhead_pct, 2),
                "import_vs_naive": _ratio(tk.import_s, naive.import_s, 3) if naive else None,
                "import_vs_uvexpert": _ratio(tk.import_s, ux.import_s, 3) if ux else None,
                "import_without_bytecode_s": tk.notes.get("import_without_bytecode_s"),
            }
            print("\ntargets torchkiln:", json.dumps(targets["torchkiln"]))
        return {
            "workload": self.workload.name,
            "engine": self.engine.info.to_dict(),
            "cpus": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
            "repeat": self.args.repeat,
            "results": rows,
            "cold_x_floor_per_round": per_round,
            "ratios_vs_naive": ratios,
            "targets": targets,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def cleanup(self) -> None:
        """Remove the work folder, this run's images and the cache mounts it made (disk is shared)."""
        shutil.rmtree(self.work, ignore_errors=True)
        for a in IMAGES:
            self.engine.remove_image(f"kiln-bench/{self.workload.name}-{a}:latest")
        self.engine.remove_image(f"kiln-bench/{self.workload.name}-cli:latest")
        for image_id in self.built:  # earlier builds of a tag, left untagged by the rebuilds
            self.runner.run([self.engine.info.binary, "rmi", image_id], check=False)
        if self.engine.name == "docker":
            # the run's cache mounts have ids of their own; the 20.10 CLI cannot prune by id, so
            # prune every cache mount not in use (package caches only: they refill on the next build)
            self.runner.run([self.engine.info.binary, "builder", "prune", "-f", "--filter", "type=exec.cachemount"],
                            check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="cpu")
    p.add_argument("--approaches", default=",".join(APPROACHES))
    p.add_argument("--engine", default="docker")
    p.add_argument("--import-runs", type=int, default=10,
                   help="fresh containers per image for the import time (the images alternate)")
    p.add_argument("--repeat", type=int, default=1,
                   help="cold builds per approach, in alternating rounds; the median is reported, every sample kept")
    p.add_argument("--scenarios", default="cold,edit,add",
                   help="which rebuild scenarios to run besides the cold build (edit, add); size and import always")
    p.add_argument("--out", type=Path, help="write the JSON report here")
    p.add_argument("--cli-rebuild", action=argparse.BooleanOptionalAction, default=True,
                   help="also time a real `kiln build` after an app edit (it builds once with the real cache ids "
                        "first: skip it for big workloads on a small disk)")
    p.add_argument("--keep", action="store_true", help="keep the work folder, the images and the cache mounts")
    args = p.parse_args()
    bench = Bench(args)
    try:
        report = bench.run()
    except KilnError as e:
        print(f"error: {e.message}\n{e.details or ''}\nfix: {e.hint}", file=sys.stderr)
        return int(e.exit_code)
    finally:
        if not args.keep:
            bench.cleanup()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
