#!/usr/bin/env python3
"""What an arm64 image costs on an x86_64 machine, where every build step runs under qemu-user.

    python bench/bench_arm64.py --arm64-index DIR_OR_URL [--bootstrap] [--out bench/results/arm64.json]

One after the other, in one run on the same engine (docker): a cold build (``--no-cache``) of
``examples/cpu-arm64.toml`` (linux/arm64: torch 2.10.0, PyPI's aarch64 CPU build, under emulation)
and, as the native baseline, of ``examples/cpu.toml`` (linux/amd64: torch 2.13.0+cpu), each on its
offline base (``kiln-base:bookworm`` / ``-arm64``), then ``python -c "import torch"`` once in each
image. With ``--bootstrap`` it also makes both offline bases again under temporary tags (debootstrap,
the arm64 second stage under qemu; downloaded packages come from torchkiln's cache when they are
there). It prints seconds, image sizes, the ratios arm64/amd64 and the load average (the machine is
shared: read the ratios, not the seconds). Images it made are removed afterwards.

``--arm64-index``: a package index (PEP 503 folder or URL) holding the aarch64 wheels of the arm64
example (tests/integration/test_build_arm64.py leaves one in the temporary folder,
``kiln-test-wheels-aarch64/simple``); the amd64 baseline takes this machine's pip configuration.
The two examples differ in their torch release (2.10.0 against 2.13.0: PyPI has no aarch64 CPU
build of 2.13.0, this machine's mirror no x86_64 CPU build of 2.10.0); their torch wheels are
140 MB and 180 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from torchkiln.building.bootstrap import BaseRequest, bootstrap
from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.building.sources import SourceLayer
from torchkiln.engines import get_engine

ROOT = Path(__file__).resolve().parents[1]


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _build(engine, spec: Path, base: str, flags: SourceLayer, from_pip: bool, tag: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    load = _load()
    summary = build_image(spec, engine, BuildOptions(base=base, tag=tag, no_cache=True, flags=flags,
                                                     from_pip=from_pip), env={})
    t0 = time.perf_counter()
    r = engine.run(summary.image, ["python", "-c", "import torch, platform; print(platform.machine())"], check=False)
    imported = time.perf_counter() - t0
    engine.remove_image(summary.image)
    return {"spec": spec.name, "seconds": round(summary.seconds, 1), "build_seconds": round(summary.build_seconds, 1),
            "stages": {s.name: round(s.seconds, 1) for s in summary.stages}, "size_bytes": summary.size_bytes,
            "import_torch_seconds": round(imported, 1), "machine": r.stdout.strip().splitlines()[-1:],
            "load_before": load, "load_after": _load()}


def _bootstrap(engine, platform: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    load = _load()
    tag = "kiln-test/bench-base:bookworm" + ("-arm64" if platform == "linux/arm64" else "")
    result = bootstrap(engine, BaseRequest(tag=tag, platform=platform), force=True)
    engine.remove_image(tag)
    return {"platform": platform, "seconds": round(result.seconds, 1), "size_bytes": result.size,
            "load_before": load, "load_after": _load()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm64-index", required=True, help="index (folder or URL) with the arm64 example's wheels")
    ap.add_argument("--bootstrap", action="store_true", help="also time both offline bases, made again")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = get_engine("docker")
    pid = os.getpid()
    out: dict[str, object] = {"engine": engine.info.to_dict(), "cpus": os.cpu_count()}
    if args.bootstrap:
        out["bootstrap"] = {p: _bootstrap(engine, p) for p in ("linux/amd64", "linux/arm64")}
    arm = _build(engine, ROOT / "examples" / "cpu-arm64.toml", "kiln-base:bookworm",
                 SourceLayer("flag", index_url=args.arm64_index), False, f"kiln-test/bench-arm64:{pid}")
    amd = _build(engine, ROOT / "examples" / "cpu.toml", "kiln-base:bookworm", SourceLayer("flag"), True,
                 f"kiln-test/bench-amd64:{pid}")
    out["build"] = {"linux/arm64": arm, "linux/amd64": amd}
    ratios = {"cold_build": round(float(arm["seconds"]) / float(amd["seconds"]), 2),  # type: ignore[arg-type]
              "import_torch": round(float(arm["import_torch_seconds"]) / float(amd["import_torch_seconds"]), 1)}  # type: ignore[arg-type]
    if args.bootstrap:
        b = out["bootstrap"]
        ratios["bootstrap"] = round(b["linux/arm64"]["seconds"] / b["linux/amd64"]["seconds"], 2)  # type: ignore[index]
    out["ratios_arm64_over_amd64"] = ratios
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
