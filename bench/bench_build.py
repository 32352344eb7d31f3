#!/usr/bin/env python3
"""Build the same workload four ways in one run and compare them.

Approaches (all on the same engine, the same offline Debian bookworm base and the same package
sources, in one run so that machine load affects them alike):

- ``torchkiln``: the Dockerfile ``kiln build`` renders (uv, a torch layer of its own, a slim runtime);
- ``naive``: one stage, the app copied first, ``pip install`` leaving pip's cache in the layer;
- ``twostage``: a conventional two-stage Dockerfile (``pip install --prefix`` in a builder with a
  pip cache mount, the result copied into a runtime stage, the app copied last);
- ``hpccm``: an hpc-container-maker recipe (``bench/hpccm_recipe.py``) rendered to a Dockerfile.

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

from torchkiln.build import sources as src
from torchkiln.build.bootstrap import BaseRequest, bootstrap
from torchkiln.engines import Engine, get_engine
from torchkiln.engines.engine import BuildOutcome
from torchkiln.errors import KilnError
from torchkiln.build.context import write_context
from torchkiln.load import load_plan
from torchkiln.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
APPROACHES = ("torchkiln", "naive", "twostage", "hpccm")


@dataclass(frozen=True)
class Workload:
    name: str
    spec: str
    extra_package: str  # the "one small pip package" added in the add-package scenario


WORKLOADS = {
    "cpu": Workload("cpu", "cpu.toml", "idna"),
    "cu130": Workload("cu130", "cu130-hopper.toml", "idna"),
}


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


# -- package sources for pip ---------------------------------------------------------------------------


@contextmanager
def pip_sources(sources: src.Sources, ca: Path | None) -> Iterator[dict[str, Path]]:
    """Serve local folders over HTTP and write a pip.conf; yields the secrets for pip builds."""
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
        with tempfile.TemporaryDirectory(prefix="bench-pip-") as tmp:
            conf = Path(tmp) / "pip.conf"
            conf.write_text("\n".join(lines) + "\n")
            secrets = {"pip-conf": conf}
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


def import_times(engine: Engine, image: str, runs: int, env: dict[str, str] | None = None) -> dict[str, float]:
    imports, walls = [], []
    for _ in range(runs):
        start = time.monotonic()
        r = engine.run(image, ["python3", "-c", IMPORT_SCRIPT], env=env, check=True)
        walls.append(time.monotonic() - start)
        imports.append(float(r.stdout.strip().splitlines()[-1]))
    return {"import_s": statistics.median(imports), "container_s": statistics.median(walls)}


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
    def torchkiln_build(self, base: str, tag: str, *, no_cache: bool = False) -> tuple[float, BuildOutcome]:
        _spec, plan, spec_dir = load_plan(self.spec)
        plan = dataclasses.replace(plan, base_image=base)
        ctx = self.work / f"ctx-torchkiln-{self.round}"  # a new folder: BuildKit has none of it yet
        start = time.monotonic()
        write_context(plan, spec_dir, ctx)
        df = ctx / "Dockerfile"
        text = df.read_text()
        for target in ("/root/.cache/uv", "/var/cache/apt", "/var/lib/apt/lists"):
            cache_id = f"{self.cache_id}{target}"
            text = text.replace(f"type=cache,target={target}", f"type=cache,id={cache_id},target={target}")
        df.write_text(text)
        with src.prepare(self.sources, ctx) as prepared:
            out = self.engine.build(ctx, df, target="runtime", secrets=prepared.secrets,
                                    network=prepared.network, no_cache=no_cache)
        self.engine.tag(out.image_id, tag)
        self.built.add(out.image_id)
        return time.monotonic() - start, out

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
        for root in [self.spec.parent, *(self.work / f"ctx-{a}" for a in APPROACHES if a != "torchkiln")]:
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
        for a in APPROACHES:
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
                      kiln_base if a == "torchkiln" else pip_base)
            for a in approaches
        }
        with pip_sources(self.sources, self.ca) as pip_secrets:

            def build(a: str, **kw: Any) -> tuple[float, BuildOutcome]:
                r = results[a]
                if a == "torchkiln":
                    return self.torchkiln_build(r.base, r.image, **kw)
                return self.baseline_build(a, r.base, r.image, pip_secrets, **kw)

            samples: dict[str, list[tuple[float, BuildOutcome]]] = {a: [] for a in approaches}
            for rnd in range(self.args.repeat):  # rounds alternate the approaches: load hits all alike
                self.round = rnd
                for a in approaches:
                    log(f"{a}: cold build, round {rnd + 1} of {self.args.repeat}")
                    samples[a].append(build(a, no_cache=True, **({} if a == "torchkiln" else {"fresh": True})))
            for a in approaches:
                ordered = sorted(samples[a], key=lambda x: x[0])
                secs, out = ordered[(len(ordered) - 1) // 2]  # the median build (the lower one of an even count)
                results[a].cold_s = secs
                results[a].notes["cold_steps"] = [s.to_dict() for s in out.steps]
                results[a].notes["cold_export_s"] = sum(s.seconds or 0 for s in out.steps if s.stage == "export")
                results[a].notes["cold_samples_s"] = [round(x, 3) for x, _ in samples[a]]
            self.edit_app()
            for a in approaches if "edit" in self.args.scenarios else ():
                log(f"{a}: rebuild after an app edit")
                results[a].app_edit_s, out = build(a)
                results[a].notes["app_edit_rebuilt"] = [s.title for s in out.steps
                                                       if s.is_instruction and s.status == "done"
                                                       and not s.name.startswith("FROM")]
            for a in approaches:
                r = results[a]
                log(f"{a}: size and import time")
                r.size_bytes = self.engine.inspect_image(r.image).size
                base_size = self.engine.inspect_image(r.base).size
                installed = site_bytes(self.engine, r.image) - site_bytes(self.engine, r.base)
                _, app, _ = self.requirements()
                app_bytes = sum((self.spec.parent / p).stat().st_size for p in app)
                r.floor_bytes = base_size + installed + app_bytes
                r.notes.update(base_bytes=base_size, installed_bytes=installed, app_bytes=app_bytes)
                times = import_times(self.engine, r.image, self.args.import_runs)
                r.import_s, r.container_s = times["import_s"], times["container_s"]
                if a == "torchkiln":  # the same image with its bytecode ignored: what it buys
                    nopyc = import_times(self.engine, r.image, self.args.import_runs,
                                         env={"PYTHONPYCACHEPREFIX": "/tmp/kiln-bench-nopyc"})
                    r.notes["import_without_bytecode_s"] = nopyc["import_s"]
                    pyc = self.engine.run(r.image, ["sh", "-c", "find /opt/venv -name '*.pyc' | wc -l"], check=True)
                    r.notes["pyc_files"] = int(pyc.stdout.strip().splitlines()[-1])
            self.add_package()
            for a in approaches if "add" in self.args.scenarios else ():
                log(f"{a}: rebuild after adding {self.workload.extra_package}")
                results[a].add_package_s, _ = build(a)
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
        rows = []
        header = (f"{'approach':<10} {'cold s':>8} {'app edit s':>11} {'add pkg s':>10} {'size MB':>9} "
                  f"{'over floor':>11} {'import s':>9}")
        print(f"\nworkload {self.workload.name} · {self.engine.info.name} {self.engine.info.server_version} "
              f"({self.engine.info.builder}) · {os.cpu_count()} CPUs")
        print(header)
        for r in results.values():
            print(f"{r.approach:<10} {r.cold_s:8.1f} {r.app_edit_s:11.2f} {r.add_package_s:10.1f} "
                  f"{r.size_bytes / 1e6:9.0f} {r.overhead_pct:10.1f}% {r.import_s:9.2f}")
            rows.append(r.to_dict())
        ratios: dict[str, dict[str, float | None]] = {}
        if naive is not None:
            print("\nratios (naive / approach; > 1 means faster or smaller than naive):")
            for r in results.values():
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
        for name in ("torchkiln",):
            tk = results.get(name)
            if tk is None:
                continue
            hp, two = results.get("hpccm"), results.get("twostage")
            targets[name] = {
                "cold_vs_hpccm": _ratio(hp.cold_s, tk.cold_s) if hp else None,
                "app_edit_build_s": round(tk.app_edit_s, 3),
                "app_edit_kiln_cli_s": tk.notes.get("kiln_build_cli_app_edit_s"),
                "add_package_vs_twostage": _ratio(two.add_package_s, tk.add_package_s) if two else None,
                "overhead_pct": round(tk.overhead_pct, 2),
                "import_vs_naive": _ratio(tk.import_s, naive.import_s, 3) if naive else None,
                "import_without_bytecode_s": tk.notes.get("import_without_bytecode_s"),
            }
            print(f"\ntargets {name}:", json.dumps(targets[name]))
        return {
            "workload": self.workload.name,
            "engine": self.engine.info.to_dict(),
            "cpus": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
            "results": rows,
            "ratios_vs_naive": ratios,
            "targets": targets,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def cleanup(self) -> None:
        """Remove the work folder, this run's images and the cache mounts it made (disk is shared)."""
        shutil.rmtree(self.work, ignore_errors=True)
        for a in APPROACHES:
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
    p.add_argument("--import-runs", type=int, default=5)
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
