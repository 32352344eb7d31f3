#!/usr/bin/env python3
"""Compare torchkiln's fat-binary reader with ``cuobjdump --list-elf --list-ptx`` on big real libraries.

The libraries come from the CUDA torch wheel set, fetched with pip through whatever index or mirror
pip is configured to use (``pip config list``): ``libtorch_cuda.so`` from torch, ``libnccl.so.2``
from nvidia-nccl-cu13 and ``libcublasLt.so.13`` from nvidia-cublas, at the versions torch pins
(read from the torch wheel's metadata, and cuda-toolkit's for cuBLAS).

    pip install nvidia-cuda-cuobjdump        # gives cuobjdump (or put one on PATH / pass --cuobjdump)
    python scripts/check_fatbin_real.py      # exit 0 when every listing matches line for line

Wheels are kept in ``--wheel-dir`` (default: ~/.cache/torchkiln/wheels) so a second run downloads
nothing. ``--all`` also compares ``cuobjdump -all`` (relocatable device code included).
"""

from __future__ import annotations

import argparse
import email.parser
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile

from packaging.requirements import Requirement

from torchkiln.inspect.fatbin import cuobjdump_lines, read_fatbins

#: (label, distribution, member name inside the wheel)
LIBRARIES = (
    ("libtorch_cuda.so", "torch", "torch/lib/libtorch_cuda.so"),
    ("libnccl.so.2", "nvidia-nccl-cu13", "nvidia/nccl/lib/libnccl.so.2"),
    ("libcublasLt.so.13", "nvidia-cublas", "nvidia/cu13/lib/libcublasLt.so.13"),
)


def find_cuobjdump(explicit: str | None) -> str:
    if explicit:
        return explicit
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        hits = sorted(pathlib.Path(root).glob("nvidia/*/bin/cuobjdump"))
        if hits:
            return str(hits[0])
    sys.exit("cuobjdump not found: pip install nvidia-cuda-cuobjdump, or pass --cuobjdump PATH")


def pip_download(requirement: str, dest: pathlib.Path) -> pathlib.Path:
    """Download one wheel (no dependencies) through pip's configured index; return its path."""
    before = set(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), requirement]
    print(f"$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    name = Requirement(requirement).name.lower().replace("-", "_")
    spec = Requirement(requirement).specifier
    found = [
        p
        for p in dest.glob("*.whl")
        if p.name.lower().startswith(name + "-") and spec.contains(p.name.split("-")[1], prereleases=True)
    ]
    if not found:
        new = set(dest.glob("*.whl")) - before
        found = sorted(new)
    if not found:
        sys.exit(f"pip downloaded nothing for {requirement}")
    return sorted(found)[-1]


def requires(wheel: pathlib.Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.BytesParser().parsebytes(zf.read(meta))
    return [Requirement(r) for r in msg.get_all("Requires-Dist") or []]


def pinned(reqs: list[Requirement], name: str, extra: str | None = None) -> str:
    for r in reqs:
        if r.name.lower() != name:
            continue
        if extra is not None and (r.marker is None or not r.marker.evaluate({"extra": extra})):
            continue
        return f"{r.name}{r.specifier}"
    sys.exit(f"no requirement on {name} found in the wheel metadata")


def extract(wheel: pathlib.Path, member: str, dest: pathlib.Path) -> pathlib.Path:
    """Copy one library out of a wheel (the exact member, else the one with the same file name)."""
    base = member.rsplit("/", 1)[-1]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        chosen = member if member in names else next((n for n in names if n.rsplit("/", 1)[-1] == base), None)
        if chosen is None:
            sys.exit(f"{wheel.name} has no {base}")
        out = dest / base
        with zf.open(chosen) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
    return out


def listing_of(cuobjdump: str, path: pathlib.Path, all_sections: bool) -> tuple[list[str], float]:
    cmd = [cuobjdump, *(["-all"] if all_sections else []), "--list-elf", "--list-ptx", str(path)]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if r.returncode != 0 and "does not contain device code" not in r.stderr:
        sys.exit(f"cuobjdump failed on {path}: {r.stderr.strip()}")
    return [line for line in r.stdout.splitlines() if line.startswith(("ELF file", "PTX file"))], seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch", default="2.14.1", help="torch version to fetch (default 2.14.1)")
    ap.add_argument("--wheel-dir", type=pathlib.Path, default=pathlib.Path.home() / ".cache/torchkiln/wheels")
    ap.add_argument("--cuobjdump", help="path of cuobjdump (default: PATH, then the nvidia-cuda-cuobjdump wheel)")
    ap.add_argument("--all", action="store_true", help="also compare cuobjdump -all (relocatable device code)")
    args = ap.parse_args()

    cuobjdump = find_cuobjdump(args.cuobjdump)
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True, check=False).stdout
    print(f"cuobjdump: {cuobjdump} ({version.strip().splitlines()[-1] if version.strip() else '?'})")
    args.wheel_dir.mkdir(parents=True, exist_ok=True)

    torch_whl = pip_download(f"torch=={args.torch}", args.wheel_dir)
    torch_reqs = requires(torch_whl)
    nccl_whl = pip_download(pinned(torch_reqs, "nvidia-nccl-cu13"), args.wheel_dir)
    toolkit_whl = pip_download(pinned(torch_reqs, "cuda-toolkit"), args.wheel_dir)
    cublas_whl = pip_download(pinned(requires(toolkit_whl), "nvidia-cublas", extra="cublas"), args.wheel_dir)
    wheels = {"torch": torch_whl, "nvidia-nccl-cu13": nccl_whl, "nvidia-cublas": cublas_whl}

    failures = 0
    modes = [False, True] if args.all else [False]
    with tempfile.TemporaryDirectory(prefix="kiln-fatbin-check-") as tmp:
        print(f"\n{'library':<20} {'wheel':<48} {'mode':<6} {'SASS':>6} {'PTX':>5} {'match':<6} "
              f"{'ours':>8} {'cuobjdump':>10}")  # fmt: skip
        for label, dist, member in LIBRARIES:
            lib = extract(wheels[dist], member, pathlib.Path(tmp))
            for all_sections in modes:
                t = time.perf_counter()
                listing = read_fatbins(lib, all_sections=all_sections)
                ours_s = time.perf_counter() - t
                ours = list(cuobjdump_lines(listing.entries, lib.name))
                ref, ref_s = listing_of(cuobjdump, lib, all_sections)
                ok = ours == ref
                failures += not ok
                sass = sum(1 for e in listing.entries if e.kind == "sass")
                ptx = sum(1 for e in listing.entries if e.kind == "ptx")
                print(
                    f"{label:<20} {wheels[dist].name[:48]:<48} {'-all' if all_sections else 'plain':<6} {sass:>6} "
                    f"{ptx:>5} {'yes' if ok else 'NO':<6} {ours_s * 1000:>6.0f}ms {ref_s:>9.2f}s"
                )
                if not ok:
                    for i, (a, b) in enumerate(zip(ours, ref, strict=False)):
                        if a != b:
                            print(f"  first difference at line {i + 1}: ours {a!r} vs cuobjdump {b!r}")
                            break
                    else:
                        print(f"  ours has {len(ours)} lines, cuobjdump {len(ref)}")
            lib.unlink()
    print("\nall listings match" if not failures else f"\n{failures} listing(s) differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
