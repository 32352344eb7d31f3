"""Which layers a GPU node pulls after an app edit rebuilt on another machine: diff ids across two daemons.

    .venv/bin/python bench/bench_redeploy.py --spec examples/cu130-hopper.toml --out bench/results/redeploy-cu130.json

Builds the spec with ``kiln build --no-cache`` on the default dockerd (version 1), appends a line to the
app, and builds it again on a fresh dockerd (own data root, exec root and socket in a temp folder:
nothing cached, no cache mounts; only the base image is loaded into it, as a machine's own copy of it).
A node that has version 1 pulls exactly the layers whose digest differs, so the report lists, per layer,
whether its diff id agrees and its size (``docker history``). This is the redeploy part of
``bench_pull.py`` without the registry and the pulls, which need about 45 GB of disk for the cu130
workload; the pulled bytes follow from the differing layers. The second daemon, its data and the images
are removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from services import start_daemon  # noqa: E402

KILN = str(ROOT / ".venv" / "bin" / "kiln")
DOCKER = "/usr/bin/docker"


def log(msg: str) -> None:
    print(f"[redeploy {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def kiln(*args: str, env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    r = subprocess.run([KILN, *args], env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"kiln {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return round(time.monotonic() - start, 1)


def docker(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run([DOCKER, *args], env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          check=True).stdout


def layers(tag: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Diff ids with the size and command of the step that made each (history rows with a layer)."""
    ids = json.loads(docker("inspect", tag, "--format", "{{json .RootFS.Layers}}", env=env))
    rows = [line.split("\t", 1) for line in docker("history", "--no-trunc", "--human=false", "--format",
                                                   "{{.Size}}\t{{.CreatedBy}}", tag, env=env).splitlines()]
    # history is newest first and lists steps without a layer (ENV, LABEL...) with size 0; the last rows
    # are the layers' own, oldest first once reversed, keeping only those that made a layer
    made = [r for r in reversed(rows) if not r[1].startswith(("ENV ", "LABEL ", "ARG ", "USER ", "CMD ", "SHELL ",
                                                              "ENTRYPOINT ", "EXPOSE ", "/bin/sh -c #(nop)"))]
    made = made[-len(ids):] if len(made) >= len(ids) else [["0", "?"]] * (len(ids) - len(made)) + made
    return [{"diff_id": d, "bytes": int(s), "step": c[:100]} for d, (s, c) in zip(ids, made, strict=True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "cu130-hopper.toml")
    ap.add_argument("--base", default="kiln-base:bookworm", help="the base image the second daemon is given")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="krd-", dir="/tmp"))  # short: containerd's socket paths
    examples = work / "examples"
    shutil.copytree(args.spec.resolve().parent, examples)
    spec = examples / args.spec.name
    tag = f"kiln-bench/redeploy:{os.getpid()}"
    node = None
    try:
        log(f"build {args.spec.name} with --no-cache on the default dockerd")
        first_s = kiln("build", str(spec), "--tag", tag, "--no-cache")
        v1 = layers(tag)
        for app in (examples / "apps").rglob("*.py"):  # whichever the spec copies
            app.write_text(app.read_text() + "\n# edited for bench_redeploy\n")
        log(f"edited the apps; build on a fresh dockerd with only {args.base} loaded")
        node = start_daemon(work / "d", reuse_env=None)
        save = subprocess.Popen([DOCKER, "save", args.base], stdout=subprocess.PIPE)
        subprocess.run([DOCKER, "load", "-q"], stdin=save.stdout, env={**os.environ, **node.env}, check=True,
                       capture_output=True)
        assert save.wait() == 0
        second_s = kiln("build", str(spec), "--tag", tag, env=dict(node.env))
        v2 = layers(tag, dict(node.env))
        same = ([a["diff_id"] == b["diff_id"] for a, b in zip(v1, v2, strict=True)] if len(v1) == len(v2)
                else [False] * len(v2))
        total = sum(layer["bytes"] for layer in v2)
        pulled = sum(layer["bytes"] for layer, s in zip(v2, same, strict=True) if not s)
        result = {
            "spec": str(args.spec), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(),
            "build_seconds": {"first": first_s, "second_daemon": second_s},
            "layers": len(v2), "layers_identical": sum(same),
            "image_bytes": total, "redeploy_bytes_uncompressed": pulled,
            "redeploy_fraction": float(f"{pulled / total:.3g}") if total else None,
            "per_layer": [{**b, "same_as_first": s} for b, s in zip(v2, same, strict=True)],
        }
        log(f"{sum(same)} of {len(v2)} layers identical; a node with the first version pulls "
            f"{pulled} of {total} bytes (uncompressed, a fraction of {result['redeploy_fraction']:.1e})")
        text = json.dumps(result, indent=2)
        if args.out:
            args.out.write_text(text + "\n")
        else:
            print(text)
        return 0
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True)
        if node is not None:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
