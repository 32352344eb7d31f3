"""Cold builds on a second machine with and without the first machine's registry build cache.

One run: a real registry (``docker-registry`` on 127.0.0.1) and the offline base pushed to it; the
main daemon builds ``examples/cpu.toml`` with ``--cache-to REGISTRY/…``; then, ``--rounds`` times,
a freshly started second dockerd (an empty data root: a second CI machine) builds the same spec
cold without a cache, and another fresh one with ``--cache-from``. Both pull the base from the
registry. Prints the medians, the ratio, and which steps were cached; ``--out`` writes every
sample as JSON. The machine's load average is printed with the numbers (the cores are shared).

    .venv/bin/python bench/bench_registry_cache.py --rounds 2 --out bench/results/registry-cache.json

Needs root (a second dockerd, the registry's storage) and the package mirror of pip's configuration
(or the ``KILN_*`` source variables).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from services import start_daemon, start_registry  # noqa: E402

from torchkiln.building.bootstrap import BaseRequest, bootstrap  # noqa: E402
from torchkiln.building.execute import BuildOptions, BuildSummary, build_image  # noqa: E402
from torchkiln.building.sources import layer_from_env, layer_from_pip  # noqa: E402
from torchkiln.engines import get_engine  # noqa: E402
from torchkiln.runner import Runner  # noqa: E402

SPEC = ROOT / "examples" / "cpu.toml"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def sources():  # type: ignore[no-untyped-def]
    keys = ("KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS", "KILN_TORCH_INDEX")
    layer = layer_from_env(os.environ, Path.cwd()) if any(os.environ.get(k) for k in keys) else layer_from_pip(Runner())
    return replace(layer, origin="flag")


def second_machine_build(work: Path, name: str, options: BuildOptions) -> tuple[float, BuildSummary]:
    """A cold build in a second dockerd started for it alone (stopped and removed afterwards)."""
    daemon = start_daemon(work / name, reuse_env=None)
    try:
        engine = get_engine("docker", Runner(env=daemon.env))
        start = time.monotonic()
        summary = build_image(SPEC, engine, options, env={})
        return time.monotonic() - start, summary
    finally:
        daemon.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="cold builds per variant (alternating)")
    ap.add_argument("--out", type=Path, help="write every sample here as JSON")
    args = ap.parse_args()

    main_engine = get_engine("docker", Runner())
    base = bootstrap(main_engine, BaseRequest()).image
    flags = sources()
    work = Path(tempfile.mkdtemp(prefix="kbc-", dir="/tmp"))  # short: containerd's socket paths
    registry = start_registry(work / "registry", reuse_env=None)
    tag = f"kiln-test/bench-cache:{os.getpid()}"
    base_ref = registry.ref("kiln-test/base:bookworm")
    cache = registry.ref("kiln-test/bench-cpu-cache:buildcache")
    samples: dict[str, list[dict[str, Any]]] = {"cold": [], "cache_from": []}
    try:
        main_engine.tag(base, base_ref)
        main_engine.push(base_ref)
        log(f"first machine: build with --cache-to {cache} (load {load()})")
        first = build_image(SPEC, main_engine, BuildOptions(base=base_ref, tag=tag, cache_to=cache, flags=flags),
                            env={})
        log(f"  {first.seconds:.1f} s, {first.cache_hits} steps cached locally")
        for i in range(args.rounds):
            for variant, cache_from in (("cold", ()), ("cache_from", (cache,))):
                log(f"round {i + 1}: second machine, {variant} (load {load()})")
                opts = BuildOptions(base=base_ref, tag=tag, cache_from=cache_from, flags=flags)
                seconds, s = second_machine_build(work, f"d{i}{variant[0]}", opts)
                cached = [st.title for st in s.steps if st.is_instruction and st.status == "cached"]
                samples[variant].append({"seconds": round(seconds, 2), "build_seconds": round(s.build_seconds, 2),
                                         "cache_hits": s.cache_hits, "cache_misses": s.cache_misses,
                                         "cached_steps": cached, "load_before": load()})
                log(f"  {seconds:.1f} s ({s.cache_hits} cached, {s.cache_misses} run)")
    finally:
        for ref in (tag, base_ref, cache):
            main_engine.remove_image(ref)
        registry.stop()

    cold = statistics.median(x["seconds"] for x in samples["cold"])
    warm = statistics.median(x["seconds"] for x in samples["cache_from"])
    result = {
        "spec": "examples/cpu.toml",
        "engine": main_engine.info.to_dict(),
        "first_machine_seconds": round(first.seconds, 2),
        "cold_median_s": cold,
        "cache_from_median_s": warm,
        "ratio": round(cold / warm, 2),
        "samples": samples,
        "cpus": os.cpu_count(),
    }
    print(f"second machine, cold build of {result['spec']} (median of {args.rounds}):")
    print(f"  without a cache:            {cold:6.1f} s  {[x['seconds'] for x in samples['cold']]}")
    print(f"  --cache-from the registry:  {warm:6.1f} s  {[x['seconds'] for x in samples['cache_from']]}")
    print(f"  ratio: {result['ratio']}x  (load average now {load()} on {os.cpu_count()} cores)")
    print("  cached with --cache-from: " + "; ".join(samples["cache_from"][-1]["cached_steps"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
