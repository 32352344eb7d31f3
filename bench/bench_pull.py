"""What a fresh node pays to start a torchkiln image, against the uv-expert anchor of the same run.

One run, everything on this machine:

1. builds the CPU example with torchkiln's renderer and the uv-expert anchor (``bench_build.py``'s
   ``uvexpert``: uv's Docker guide) on the default daemon, from the same base and package sources;
2. pushes both (gzip, as ``docker push`` does) to a throwaway ``docker-registry`` on 127.0.0.1;
3. starts a second dockerd (its own ``--data-root``/``--exec-root``/socket in a temp folder: a new
   node with nothing cached) and, per image in alternating order, pulls it and runs ``import torch``
   in a new container: bytes transferred (the compressed layers of the manifest, none present before)
   and seconds from ``docker pull`` to the import done; the image is removed before the next one;
4. redeploy: one line appended to the app, both images rebuilt on a *third* dockerd (a builder with its
   own data root: nothing of the first builds, no layer cache, no cache mounts; only the base image is
   loaded into it), pushed from there, and pulled on the node that still has the first version: the
   bytes of the layers it did not have (``--redeploy-on same`` rebuilds on the first daemon with
   ``--no-cache`` instead);
5. the layer digests (``RootFS.Layers``: uncompressed diff ids) of the two torchkiln builds (two machines'
   worth of daemons), compared.

Ratios are against the anchor of the same run. The registry, the second daemon, the work folder and
every image are removed at the end, also on failure.

    .venv/bin/python bench/bench_pull.py --rounds 2 --out bench/results/pull-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_build import Bench, pip_sources  # noqa: E402

from services import Daemon, Registry, start_daemon, start_registry  # noqa: E402
from torchkiln.engines import get_engine  # noqa: E402
from torchkiln.runner import Runner  # noqa: E402

IMPORT = ["python", "-c", "import torch; torch.ones(2).sum()"]


def log(msg: str) -> None:
    print(f"[pull {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def layers_of(registry: Registry, repo: str, tag: str) -> list[tuple[str, int]]:
    found = registry.manifest(repo, tag)
    assert found is not None, f"{repo}:{tag} is not in the registry"
    _, manifest = found
    return [(layer["digest"], int(layer["size"])) for layer in manifest["layers"]]  # type: ignore[index, union-attr]


def diff_ids(image: str, daemon: Daemon | None = None) -> list[str]:
    env = {**os.environ, **(daemon.env if daemon is not None else {})}
    r = subprocess.run(["/usr/bin/docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image],
                       check=True, capture_output=True, text=True, env=env)
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def pull_and_import(node: Daemon, ref: str) -> dict[str, float]:
    start = time.monotonic()
    node.docker("pull", "-q", ref)
    pulled = time.monotonic() - start
    r = node.docker("run", "--rm", ref, *IMPORT, check=False)
    assert r.returncode == 0, r.stderr
    return {"pull_s": round(pulled, 2), "pull_import_s": round(time.monotonic() - start, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="cpu", choices=("cpu", "cu130"))
    ap.add_argument("--rounds", type=int, default=2, help="cold pulls per image (alternating order)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--redeploy-on", choices=("builder", "same"), default="builder",
                    help="rebuild v2 on a third dockerd with nothing cached (default) or on the first with --no-cache")
    args = ap.parse_args()
    bench = Bench(argparse.Namespace(workload=args.workload, engine="docker", approaches="torchkiln,uvexpert",
                                     import_runs=1, repeat=1, scenarios="", out=None, cli_rebuild=False,
                                     keep=False))
    work = Path(tempfile.mkdtemp(prefix="kpl-", dir="/tmp"))  # short: containerd's socket paths
    registry: Registry | None = None
    node: Daemon | None = None
    builder: Daemon | None = None
    pushed: list[str] = []
    tags = {a: f"kiln-bench/{args.workload}-{a}:latest" for a in ("torchkiln", "uvexpert")}
    result: dict[str, Any] = {"workload": args.workload, "redeploy_on": args.redeploy_on,
                              "engine": bench.engine.info.to_dict(),
                              "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        kiln_base, _ = bench.bases()
        with pip_sources(bench.sources, bench.ca) as secrets:
            def build(approach: str, no_cache: bool) -> None:
                if approach == "torchkiln":
                    bench.torchkiln_build(kiln_base, tags[approach], no_cache=no_cache)
                else:
                    bench.baseline_build(approach, kiln_base, tags[approach], secrets, no_cache=no_cache)

            for a in tags:
                log(f"build {a}")
                build(a, no_cache=True)
            first_ids = {a: diff_ids(tags[a]) for a in tags}
            registry = start_registry(work / "registry", reuse_env=None)

            def push(approach: str, version: str) -> str:
                repo = f"bench-pull/{args.workload}-{approach}"
                ref = registry.ref(f"{repo}:{version}")  # type: ignore[union-attr]
                bench.engine.tag(tags[approach], ref)
                bench.engine.push(ref)
                pushed.append(ref)
                return ref

            refs = {a: push(a, "v1") for a in tags}
            sizes = {a: layers_of(registry, f"bench-pull/{args.workload}-{a}", "v1") for a in tags}
            for a in tags:
                log(f"{a}: {sum(s for _, s in sizes[a]) / 1e6:.1f} MB compressed in {len(sizes[a])} layers, "
                    f"largest {max(s for _, s in sizes[a]) / 1e6:.1f} MB")
            node = start_daemon(work / "node", reuse_env=None)
            samples: dict[str, list[dict[str, float]]] = {a: [] for a in tags}
            order = list(tags)
            for i in range(args.rounds):
                for a in order if i % 2 == 0 else order[::-1]:
                    node.docker("rmi", "-f", refs[a], check=False)
                    node.docker("image", "prune", "-f", check=False)
                    log(f"round {i + 1}: fresh pull + import of {a}")
                    samples[a].append(pull_and_import(node, refs[a]))
                    log(f"  {samples[a][-1]}")
            # the node keeps v1 of both (the last round pulled each); make sure of it
            for a in tags:
                node.docker("pull", "-q", refs[a])

            bench.edit_app()
            bench.round += 1  # context folders of their own (torchkiln never writes into a folder it did not write)
            first_engine = bench.engine
            if args.redeploy_on == "builder":
                log("redeploy: app edited, both rebuilt on a third dockerd with nothing cached")
                builder = start_daemon(work / "bld", reuse_env=None)
                # the base image only (a machine's own mirror of it), then the same builds on that daemon
                save = subprocess.Popen(["/usr/bin/docker", "save", kiln_base], stdout=subprocess.PIPE)
                subprocess.run(["/usr/bin/docker", "load", "-q"], stdin=save.stdout, env={**os.environ, **builder.env},
                               check=True, capture_output=True)
                assert save.wait() == 0
                bench.engine = get_engine("docker", Runner(env=dict(builder.env)))
            else:
                log("redeploy: app edited, both rebuilt with --no-cache")
            try:
                for a in tags:
                    build(a, no_cache=True)
                second_ids = {a: diff_ids(tags[a], builder) for a in tags}
                refs2 = {a: push(a, "v2") for a in tags}
            finally:
                bench.engine = first_engine
            redeploy: dict[str, Any] = {}
            for a in tags:
                have = {d for d, _ in sizes[a]}
                new = layers_of(registry, f"bench-pull/{args.workload}-{a}", "v2")
                start = time.monotonic()
                node.docker("pull", "-q", refs2[a])
                redeploy[a] = {
                    "bytes": sum(s for d, s in new if d not in have),
                    "image_bytes": sum(s for _, s in new),
                    "layers_pulled": sum(1 for d, _ in new if d not in have),
                    "layers": len(new),
                    "pull_s": round(time.monotonic() - start, 2),
                }
                redeploy[a]["fraction"] = round(redeploy[a]["bytes"] / redeploy[a]["image_bytes"], 4)

        def med(a: str, key: str) -> float:
            return statistics.median(s[key] for s in samples[a])

        images = {}
        for a in tags:
            images[a] = {"compressed_bytes": sum(s for _, s in sizes[a]), "layers": len(sizes[a]),
                         "largest_layer_bytes": max(s for _, s in sizes[a]),
                         "pull_median_s": med(a, "pull_s"), "pull_import_median_s": med(a, "pull_import_s"),
                         "samples": samples[a]}
        t, u = images["torchkiln"], images["uvexpert"]
        same = [x == y for x, y in zip(first_ids["torchkiln"], second_ids["torchkiln"], strict=False)]
        result.update({
            "images": images,
            "ratios_vs_uvexpert": {
                "compressed_bytes": round(t["compressed_bytes"] / u["compressed_bytes"], 3),
                "pull_import_speedup": round(u["pull_import_median_s"] / t["pull_import_median_s"], 2),
                "redeploy_bytes": round(redeploy["torchkiln"]["bytes"] / max(redeploy["uvexpert"]["bytes"], 1), 4),
            },
            "redeploy": redeploy,
            "reproducible": {
                "torchkiln_layers_identical": same,
                "torchkiln_diff_ids": {"first": first_ids["torchkiln"], "second": second_ids["torchkiln"]},
                "uvexpert_layers_identical": [x == y for x, y in zip(first_ids["uvexpert"], second_ids["uvexpert"],
                                                                     strict=False)],
            },
        })
    finally:
        if node is not None:
            node.stop()
        if builder is not None:
            builder.stop()
        if registry is not None:
            registry.stop()
        for ref in pushed:
            bench.engine.remove_image(ref)
        bench.cleanup()
        shutil.rmtree(work, ignore_errors=True)

    print(json.dumps({k: result[k] for k in ("ratios_vs_uvexpert", "redeploy")}, indent=1))
    for a, img in result["images"].items():
        print(f"{a:10s} {img['compressed_bytes'] / 1e6:8.1f} MB in {img['layers']} layers, "
              f"pull + import {img['pull_import_median_s']:.1f} s")
    print(f"torchkiln layers identical across the two builds ({args.redeploy_on}):",
          result["reproducible"]["torchkiln_layers_identical"])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
