#!/usr/bin/env python3
"""How long does reading a torch-bearing base image's facts take (``[torch] source = "image"``)?

    python bench/bench_facts.py IMAGE [IMAGE ...] [--engine docker|podman] [--rounds 3] [--direct-only] [--out F.json]

For each image and round, one after the other on the same machine: ``ENGINE save IMAGE > /dev/null``
(the baseline: what exporting the image alone costs), the facts read in place from the engine's
layer folders (``read="direct"``) and the facts read from the engine's save on a pipe
(``read="export"``), each without torchkiln's facts cache; then one cached read (what every later
resolve of the same image costs). It prints seconds (median of the rounds), the bytes the reader
read against the image's size, the ratios against the save of the same run, the load average, and
whether the two ways agree on the facts. ``--direct-only`` leaves out the save and the export (docker
20.10's save writes the whole image to a temporary folder of the daemon first: on a full disk it fails).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace

from torchkiln.engines import get_engine
from torchkiln.images.facts import ImageFacts, read_image_facts

VOLATILE = ("read", "read_note", "bytes_read", "seconds", "image_size")


def _save_seconds(binary: str, image: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([binary, "save", image], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def _same(a: ImageFacts, b: ImageFacts) -> bool:
    return replace(a, **{k: getattr(b, k) for k in VOLATILE}) == b


def bench(image: str, engine_name: str, rounds: int, direct_only: bool = False) -> dict[str, object]:
    engine = get_engine(engine_name)
    saves, direct, export = [], [], []
    facts_d = facts_e = None
    for _ in range(rounds):
        if not direct_only:
            saves.append(_save_seconds(engine.info.binary, image))
        facts_d = read_image_facts(image, engine, use_cache=False, read="auto")
        direct.append(facts_d.seconds)
        if not direct_only:
            facts_e = read_image_facts(image, engine, use_cache=False, read="export")
            export.append(facts_e.seconds)
    assert facts_d is not None
    if facts_e is None:
        facts_e = facts_d
        saves, export = [float("nan")], [float("nan")]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KILN_CACHE_DIR"] = cache
        read_image_facts(image, engine)
        t0 = time.perf_counter()
        read_image_facts(image, engine)
        cached = time.perf_counter() - t0
    save = statistics.median(saves)
    out = {
        "image": image, "size_bytes": facts_d.image_size, "torch": facts_d.torch_version, "cuda": facts_d.torch_cuda,
        "archs": list(facts_d.arch_entries), "site": facts_d.site,
        "save_s": round(save, 2), "direct_s": round(statistics.median(direct), 3), "direct_how": facts_d.read,
        "direct_note": facts_d.read_note, "direct_bytes_read": facts_d.bytes_read,
        "export_s": round(statistics.median(export), 3), "export_bytes_read": facts_e.bytes_read,
        "cached_s": round(cached, 3), "agree": _same(facts_d, facts_e), "rounds": rounds,
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images", nargs="+")
    ap.add_argument("--engine", default="docker", choices=("docker", "podman"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--direct-only", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    results = []
    for image in args.images:
        r = bench(image, args.engine, args.rounds, args.direct_only)
        results.append(r)
        size = int(r["size_bytes"])  # type: ignore[call-overload]
        print(f"{image}: {size / 1e9:.2f} GB, torch {r['torch']} (CUDA {r['cuda']}), {len(r['archs'])} archs "
              f"in libtorch_cuda.so; load average {r['loadavg'][0]:.1f} on {r['cpus']} CPUs")  # type: ignore[index]
        print(f"  {args.engine} save > /dev/null   {r['save_s']:8.2f} s   1.00x")
        print(f"  facts, {r['direct_how']:<6}          {r['direct_s']:8.3f} s   {r['direct_s'] / r['save_s']:.3f}x"  # type: ignore[operator]
              f"   read {int(r['direct_bytes_read']) / 1e6:.1f} MB of {size / 1e9:.2f} GB"  # type: ignore[call-overload]
              + (f" ({r['direct_note']})" if r["direct_note"] else ""))
        print(f"  facts, export           {r['export_s']:8.3f} s   {r['export_s'] / r['save_s']:.3f}x"  # type: ignore[operator]
              f"   kept {int(r['export_bytes_read']) / 1e6:.1f} MB of the stream")  # type: ignore[call-overload]
        print(f"  facts, cached           {r['cached_s']:8.3f} s   agree(direct, export) = {r['agree']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
