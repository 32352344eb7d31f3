#!/usr/bin/env python3
"""The floor of a cold image build on this machine: the work no container engine can skip.

For one set of requirements, outside any engine:

1. **unpack** — read the very wheels an install uses (resolved with uv from the same package sources
   the builds get) and write their files into an empty folder, in parallel (one thread per core:
   zlib and file writes release the GIL);
2. **bytecode** — write the ``.pyc`` files a container needs: those of the modules ``import torch``
   (and the spec's other precompiled modules) loads, found once before timing, compiled with
   ``compileall`` on every core;
3. **layer** — tar the resulting tree once and sha256 the stream (what an engine does to export a
   layer: the uncompressed tar's digest is the layer's diff id).

Untimed preparation: resolving the wheels (``uv pip compile --format pylock.toml``), fetching the
remote ones into a local folder (so the floor reads files only, like an engine reading its context),
and finding the module list. The time is the sum of the three timed phases; ``bench_build.py`` runs
it in the same rounds as the builds, so load on the shared machine hits it alike.

Our own code: it is a measurement of the machine, and no library measures "unpack + compile + tar".

Usage (standalone): python bench/floor.py --requirements req.txt [--import torch] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.parse
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the Python the image runs (bytecode must match its minor version; the floor compiles with the host's)
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"


@dataclass
class FloorInputs:
    wheels: list[Path]
    modules: list[str] = field(default_factory=list)  # source files (relative to the tree) to compile
    wheel_bytes: int = 0


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except ImportError:
        found = shutil.which("uv")
        if not found:
            raise SystemExit("floor: uv is needed to resolve the wheels (pip install uv)") from None
        return found


def resolve_wheels(requirements: list[str], uv_toml: str, work: Path) -> list[Path]:
    """The wheel files an install of ``requirements`` uses, local paths (remote ones fetched once)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
    (work / "uv.toml").write_text(uv_toml)
    lock = work / "pylock.toml"
    env = {**os.environ, "UV_CONFIG_FILE": str(work / "uv.toml"), "UV_NO_PROGRESS": "1"}
    subprocess.run(
        [uv_bin(), "pip", "compile", str(work / "requirements.txt"), "--python-version", PYTHON_VERSION,
         "--python-platform", PLATFORM, "--format", "pylock.toml", "-o", str(lock), "-q"],
        check=True, env=env,
    )
    fetched = work / "fetched"
    fetched.mkdir(exist_ok=True)
    wheels = []
    for pkg in tomllib.loads(lock.read_text()).get("packages", []):
        entries = pkg.get("wheels") or []
        if not entries:
            raise SystemExit(f"floor: {pkg['name']} resolved to no wheel")
        entry = entries[0]
        url = entry.get("url") or entry.get("path")
        if url.startswith("file://"):
            wheels.append(Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)))
        elif "://" in url:
            dest = fetched / urllib.parse.unquote(url.rsplit("/", 1)[1])
            if not dest.exists():
                with urllib.request.urlopen(url, timeout=120) as r, open(dest, "wb") as f:
                    shutil.copyfileobj(r, f)
            wheels.append(dest)
        else:
            wheels.append(Path(url))
    return wheels


def find_modules(tree: Path, imports: list[str]) -> list[str]:
    """The .py files under ``tree`` that importing ``imports`` loads (one untimed import, no .pyc written)."""
    script = (
        "import json, sys\n"
        f"import {', '.join(imports)}\n"
        "root = sys.argv[1]\n"
        "files = sorted({f for m in list(sys.modules.values()) if (f := getattr(m, '__file__', None) or '')\n"
        "                and f.startswith(root) and f.endswith('.py')})\n"
        "print(json.dumps([f[len(root) + 1:] for f in files]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-c", script, str(tree)], check=True, capture_output=True, text=True,
                       env=env, cwd=tree)
    return json.loads(r.stdout.strip().splitlines()[-1])


def unpack(wheels: list[Path], dest: Path, workers: int) -> int:
    """Every member of every wheel written under ``dest`` (threads over members); bytes written."""
    dest.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[zipfile.ZipFile, zipfile.ZipInfo]] = []
    zips = []
    for w in wheels:
        z = zipfile.ZipFile(w)
        zips.append(z)
        jobs += [(z, i) for i in z.infolist() if not i.is_dir()]
    jobs.sort(key=lambda j: -j[1].file_size)  # big members first: the pool ends together
    dirs = {str(dest / os.path.dirname(i.filename)) for _, i in jobs}
    for d in sorted(dirs):
        os.makedirs(d, exist_ok=True)
    local = threading.local()

    def handle(z: zipfile.ZipFile) -> zipfile.ZipFile:
        # one ZipFile object per thread and wheel: a ZipFile's file position is shared state
        cache = getattr(local, "zips", None)
        if cache is None:
            cache = local.zips = {}
        if z.filename not in cache:
            cache[z.filename] = zipfile.ZipFile(z.filename)
        return cache[z.filename]

    def one(job: tuple[zipfile.ZipFile, zipfile.ZipInfo]) -> int:
        z, info = job
        with handle(z).open(info) as src, open(dest / info.filename, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        if info.external_attr >> 16 & 0o111:
            os.chmod(dest / info.filename, 0o755)
        return info.file_size

    with ThreadPoolExecutor(workers) as pool:
        total = sum(pool.map(one, jobs))
    for z in zips:
        z.close()
    return total


def compile_pyc(tree: Path, modules: list[str], workers: int) -> None:
    listing = tree.parent / f"{tree.name}.pyc-list"
    listing.write_text("".join(f"{tree / m}\n" for m in modules))
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", str(workers), "-i", str(listing)],
                   check=True, stdout=subprocess.DEVNULL)
    listing.unlink()


def tar_sha256(tree: Path) -> tuple[str, int]:
    """The tree as one uncompressed tar stream, hashed (an engine's layer diff id); digest and tar bytes."""
    p = subprocess.Popen(["tar", "-C", str(tree), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
    h = hashlib.sha256()
    n = 0
    assert p.stdout is not None
    while chunk := p.stdout.read(1 << 20):
        h.update(chunk)
        n += len(chunk)
    if p.wait() != 0:
        raise SystemExit("floor: tar failed")
    return h.hexdigest(), n


def prepare(requirements: list[str], uv_toml: str, imports: list[str], work: Path) -> FloorInputs:
    wheels = resolve_wheels(requirements, uv_toml, work)
    probe = work / "probe"
    unpack(wheels, probe, os.cpu_count() or 1)
    modules = find_modules(probe, imports)
    shutil.rmtree(probe, ignore_errors=True)
    return FloorInputs(wheels=wheels, modules=modules, wheel_bytes=sum(w.stat().st_size for w in wheels))


def measure(inputs: FloorInputs, work: Path) -> dict[str, Any]:
    """One timed floor: unpack + bytecode + tar/sha256 into a fresh folder (removed afterwards)."""
    workers = os.cpu_count() or 1
    tree = Path(tempfile.mkdtemp(prefix="floor-tree-", dir=work))
    try:
        t0 = time.monotonic()
        written = unpack(inputs.wheels, tree, workers)
        t1 = time.monotonic()
        compile_pyc(tree, inputs.modules, workers)
        t2 = time.monotonic()
        digest, tar_bytes = tar_sha256(tree)
        t3 = time.monotonic()
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return {
        "floor_s": round(t3 - t0, 3),
        "unpack_s": round(t1 - t0, 3),
        "pyc_s": round(t2 - t1, 3),
        "tar_sha256_s": round(t3 - t2, 3),
        "files_bytes": written,
        "tar_bytes": tar_bytes,
        "wheel_bytes": inputs.wheel_bytes,
        "wheels": len(inputs.wheels),
        "pyc_files": len(inputs.modules),
        "layer_sha256": digest,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requirements", type=Path, required=True)
    p.add_argument("--uv-toml", type=Path, help="uv configuration naming the package sources (default: uv's own)")
    p.add_argument("--import", dest="imports", action="append", default=[], help="module whose .pyc are needed")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    reqs = [x.strip() for x in args.requirements.read_text().splitlines() if x.strip() and not x.startswith("#")]
    work = Path(tempfile.mkdtemp(prefix="kiln-floor-"))
    try:
        inputs = prepare(reqs, args.uv_toml.read_text() if args.uv_toml else "", args.imports or ["torch"], work)
        for _ in range(args.repeat):
            print(json.dumps(measure(inputs, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
