"""The rebuild after an edit of a project's code ([project], issue 26): engine time and the steps that ran.

    .venv/bin/python bench/bench_project.py --repeat 3 --out bench/results/project-edit.json

Builds tests/fixtures/projects/uvlock-src (a src-layout package locked with uv, CPU torch) once with
docker on the offline base and this machine's package sources (``KILN_*``, else pip's configuration),
then, per round, edits one line of the package and rebuilds; and, once, adds a line to a module that is
not the package's (the app-like edit that rebuilds nothing but the wheel's layer as well). Reports the
engine's build time (``build_seconds``: BuildKit alone, not rendering or the sources' preparation),
the whole command's time and the steps each rebuild ran.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from torchkiln.building.bootstrap import BaseRequest  # noqa: E402
from torchkiln.building.execute import BuildOptions, build_image  # noqa: E402
from torchkiln.building.sources import layer_from_env, layer_from_pip  # noqa: E402
from torchkiln.engines import get_engine  # noqa: E402
from torchkiln.runner import Runner  # noqa: E402


def ran(summary) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"[{s.stage}] {s.seconds or 0:.2f} s {s.title}" for s in summary.steps
            if s.is_instruction and s.status == "done" and not s.name.startswith("FROM")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = get_engine("docker", Runner())
    base = BaseRequest().image
    if not engine.image_exists(base):
        print(f"no {base}: run `kiln base bootstrap` first", file=sys.stderr)
        return 2
    layer = layer_from_env(os.environ, Path.cwd()) if any(k.startswith("KILN_") for k in os.environ) else \
        layer_from_pip(Runner())
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-project-"))
    project = work / "uvlock-src"
    shutil.copytree(ROOT / "tests" / "fixtures" / "projects" / "uvlock-src", project)
    tag = f"kiln-bench/project:{os.getpid()}"
    options = BuildOptions(base=base, tag=tag, context_dir=Path(tempfile.gettempdir()) / "kiln-bench-project-ctx",
                           flags=layer)
    rounds = []
    try:
        warm = build_image(project, engine, options, env={})
        init = project / "src" / "tinyproj" / "__init__.py"
        for i in range(args.repeat):
            # unique: a repeated edit would be a cache hit (hatchling's wheels are reproducible)
            init.write_text(init.read_text() + f"\nEDIT_{i} = {time.time_ns()}\n")
            s = build_image(project, engine, options, env={})
            rounds.append({"build_seconds": round(s.build_seconds, 3), "seconds": round(s.seconds, 3),
                           "cache_misses": s.cache_misses, "ran": ran(s)})
            print(f"edit {i + 1}: engine {s.build_seconds:.2f} s, command {s.seconds:.2f} s, "
                  f"ran {len(rounds[-1]['ran'])} steps", file=sys.stderr)
        load = os.getloadavg()
        result = {
            "load_average_1_5_15": [round(x, 2) for x in load],
            "workload": "tests/fixtures/projects/uvlock-src (uv.lock, CPU torch 2.13.0, hatchling package)",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "engine": str(getattr(engine, "info", ""))[:200]},
            "first_build_seconds": round(warm.build_seconds, 3),
            "edit_rebuild_engine_seconds": {"median": round(statistics.median(r["build_seconds"] for r in rounds), 3),
                                            "min": min(r["build_seconds"] for r in rounds),
                                            "max": max(r["build_seconds"] for r in rounds)},
            "rounds": rounds,
        }
        text = json.dumps(result, indent=2)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
    finally:
        engine.remove_image(tag)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
