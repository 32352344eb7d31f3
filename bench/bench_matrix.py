"""A 4-cell CPU matrix built on one Docker daemon vs spread over two (`kiln build --matrix`).

The four cells share the torch layer and differ in one pip package each, on the offline base.
Both daemons run on this machine (the second is started by ``tests/services.py``, or reused from
``KILN_TEST_DOCKER_HOST``), so they share its cores: the two-builder wall time shows the
scheduling overhead and what sharing cores costs, not a speed-up. The projected speed-up on two
separate machines comes from the one-daemon run's per-cell times, summed per builder under the
two-builder run's assignment (each builder's first cell includes its torch layer in the cold runs).

Two modes, each timed for one builder and for two:

- ``warm``: ``--force`` (every cell runs; the engines' caches are warm): the fixed cost per cell
  (context transfer, export, tag) and the scheduling overhead.
- ``cold``: ``--no-cache`` (every step of every cell runs): the real work of a matrix. Needs ~1.5 GB of
  free disk per cell for the build cache it leaves.

    .venv/bin/python bench/bench_matrix.py --out bench/results/matrix.json

Needs root (a second dockerd) and the package mirror of pip's configuration. The load average
before and after each run is printed with the numbers (other work on the machine shares the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from services import start_daemon  # noqa: E402

BASE = "kiln-base:bookworm"
SPEC = """\
[image]
name = "kiln-test/bench-matrix"
[torch]
version = "2.13.0"
cuda = "cpu"
[base]
image = "kiln-base:bookworm"
[matrix]
pip = [["six==1.17.0"], ["idna==3.20"], ["packaging==26.3"], ["certifi==2026.7.22"]]
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(v, 1) for v in os.getloadavg()]


def kiln_matrix(spec: Path, builders: str, mode: str, env: dict[str, str]) -> dict[str, Any]:
    flag = "--force" if mode == "warm" else "--no-cache"
    before = load()
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "torchkiln", "build", str(spec), "--matrix", "--builders", builders,
                        "--sources-from-pip", flag, "--json"], env={**os.environ, **env}, capture_output=True,
                       text=True)
    wall = time.monotonic() - start
    try:
        out = json.loads(r.stdout)
    except ValueError:
        raise SystemExit(f"kiln build --matrix failed ({r.returncode}):\n{r.stderr[-3000:]}") from None
    if r.returncode != 0:
        tails = "\n".join(f"cell {c['cell']}: {c['error']['log_tail']}" for c in out["cells"] if c.get("error"))
        raise SystemExit(f"kiln build --matrix failed ({r.returncode}):\n{tails[-4000:]}")
    return {"builders": builders, "mode": mode, "wall_seconds": round(wall, 1), "load_before": before,
            "load_after": load(), "cells": {c["cell"]: {"builder": c["builder"], "seconds": c["seconds"]}
                                            for c in out["cells"]},
            "per_builder": {b["name"]: {"cells": b["cells"], "busy_seconds": b["busy_seconds"]}
                            for b in out["builders"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="warm,cold")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the second daemon on kill too
    work = Path(tempfile.mkdtemp(prefix="kbm-", dir="/tmp"))
    daemon = start_daemon(work / "d2")
    try:
        env2 = {**os.environ, **daemon.env}
        have = subprocess.run(["/usr/bin/docker", "image", "inspect", BASE], env=env2, capture_output=True)
        if have.returncode != 0:
            log(f"loading {BASE} into the second daemon")
            save = subprocess.Popen(["/usr/bin/docker", "save", BASE], stdout=subprocess.PIPE)
            subprocess.run(["/usr/bin/docker", "load"], stdin=save.stdout, env=env2, check=True, capture_output=True)
            save.wait()
        spec = work / "spec" / "kiln.toml"
        spec.parent.mkdir()
        spec.write_text(SPEC)
        env = {"KILN_CACHE_DIR": str(Path(tempfile.gettempdir()) / "kiln-test-contexts" / "bench-matrix"), "CI": "1"}
        one, two = "default", f"default,{daemon.host}"
        log("warming both daemons (the torch layer on each)")
        kiln_matrix(spec, two, "warm", env)
        results = []
        for mode in args.modes.split(","):
            for builders in (one, two):
                log(f"{mode}: {builders}")
                res = kiln_matrix(spec, builders, mode, env)
                log(f"  wall {res['wall_seconds']} s, load {res['load_before']} -> {res['load_after']}")
                results.append(res)
        summary = []
        for mode in args.modes.split(","):
            a = next(r for r in results if r["mode"] == mode and r["builders"] == one)
            b = next(r for r in results if r["mode"] == mode and r["builders"] == two)
            sequential = sum(c["seconds"] for c in a["cells"].values())
            projected = max(sum(a["cells"][i]["seconds"] for i in pb["cells"])
                            for pb in b["per_builder"].values())
            row = {"mode": mode, "cells": len(a["cells"]), "one_builder_wall": a["wall_seconds"],
                   "one_builder_cell_seconds": round(sequential, 1), "two_builders_wall": b["wall_seconds"],
                   "two_builders_busy": {k: v["busy_seconds"] for k, v in b["per_builder"].items()},
                   "ratio_two_vs_one_here": round(a["wall_seconds"] / b["wall_seconds"], 2),
                   "projected_two_machines_wall": round(projected + (a["wall_seconds"] - sequential), 1),
                   "projected_speedup": round(a["wall_seconds"] / (projected + a["wall_seconds"] - sequential), 2)}
            summary.append(row)
            print(json.dumps(row))
        if args.out:
            args.out.write_text(json.dumps({"summary": summary, "runs": results, "cores": os.cpu_count()},
                                           indent=1) + "\n")
    finally:
        daemon.stop()
        for ref in subprocess.run(["/usr/bin/docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                                   "kiln-test/bench-matrix"], capture_output=True, text=True).stdout.split():
            subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)


if __name__ == "__main__":
    main()
