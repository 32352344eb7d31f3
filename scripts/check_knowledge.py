#!/usr/bin/env python3
"""Check the knowledge base's wheel arch lists against real torch wheels, with our own fat-binary reader.

    python scripts/check_knowledge.py WHEEL_OR_FOLDER...
    python scripts/check_knowledge.py --pip-config        # the wheel folders / index folders pip is configured with

For every torch wheel found, the script extracts ``torch/lib/libtorch_cuda.so`` to a temporary file,
lists its device code with ``torchkiln.inspect.fatbin``, derives the arch list the wheel was built for
(the plain SASS archs that carry the bulk of the kernels; the few arch-specific extras such as sm_90a
are reported separately), whether it has PTX, and compares that with the knowledge row of the wheel's
release series and CUDA variant. Exit code 1 when a row disagrees. Nothing is hard-coded: wheels come
from the arguments or from pip's own configuration.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

from torchkiln.arch import Capability
from torchkiln.inspect.fatbin import list_entries
from torchkiln.knowledge import load_knowledge

WHEEL = re.compile(r"^torch-(\d+)\.(\d+)\.(\d+)(?:\+(\w+))?-cp\d*-cp\d*t?-(manylinux\w*x86_64)\.(?:whl|so)$")


def _pip_folders() -> list[Path]:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    folders: list[Path] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if not key.endswith(("find-links", "index-url", "extra-index-url")):
            continue
        for item in value.strip().strip("'\"").split():
            path = Path(item.removeprefix("file://"))
            if item.startswith(("file://", "/")) and path.exists():
                folders.append(path.parent if path.name == "simple" else path)
    return folders


def _wheels(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        if p.is_file() and WHEEL.match(p.name):
            found.append(p)
        elif p.is_dir():
            found += [w for w in p.rglob("torch-*.whl") if WHEEL.match(w.name)]
    return sorted(set(found))


def _installed() -> list[Path]:
    """torch/lib/libtorch_cuda.so of this Python's torch, named like a wheel so the row can be found."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("torch")
    except PackageNotFoundError:
        return []
    so = Path(str(dist.locate_file("torch/lib/libtorch_cuda.so")))
    if not so.exists():
        return []
    version = dist.version
    if "+" not in version:  # a default-variant build: torch/version.py names its CUDA
        vfile = so.parents[1] / "version.py"
        found = re.search(r"^cuda\b[^=]*=\s*['\"]([\d.]+)['\"]", vfile.read_text(), re.M) if vfile.exists() else None
        if found:
            version += "+cu" + found.group(1).replace(".", "")
    link = Path(tempfile.mkdtemp()) / f"torch-{version}-cp3-cp3-manylinux_x86_64.so"
    link.symlink_to(so)
    return [link]


def measure(wheel: Path) -> tuple[list[str], list[str], bool, int] | None:
    """(bulk SASS archs, extra SASS archs, has PTX, entries) of the wheel's libtorch_cuda.so."""
    if wheel.suffix == ".so":
        return _summarise(list_entries(wheel))
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith("lib/libtorch_cuda.so")]
        if not names:
            return None
        with tempfile.NamedTemporaryFile(suffix=".so") as tmp:
            with z.open(names[0]) as src:
                while chunk := src.read(1 << 24):
                    tmp.write(chunk)
            tmp.flush()
            return _summarise(list_entries(tmp.name))


def _summarise(entries: list) -> tuple[list[str], list[str], bool, int]:
    sass = Counter(e.arch for e in entries if e.kind == "sass")
    top = max(sass.values()) if sass else 0
    bulk = sorted((a for a, n in sass.items() if n >= top * 0.5), key=lambda a: Capability.parse(a))
    extra = sorted((a for a in sass if a not in bulk), key=lambda a: (Capability.parse(a), a))
    return bulk, extra, any(e.kind == "ptx" for e in entries), len(entries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--pip-config", action="store_true", help="also search the folders pip is configured with")
    ap.add_argument("--installed", action="store_true",
                    help="check the torch installed in this Python (reads torch/lib without importing torch)")
    args = ap.parse_args()
    paths = list(args.paths) + (_pip_folders() if args.pip_config else [])
    wheels = _wheels(paths)
    if args.installed:
        wheels += _installed()
    if not wheels:
        print("no torch wheels found (give wheel files or folders, or --pip-config)", file=sys.stderr)
        return 2
    kb = load_knowledge()
    bad = 0
    for wheel in wheels:
        m = WHEEL.match(wheel.name)
        if m is None:
            continue
        version = f"{m.group(1)}.{m.group(2)}.{m.group(3)}"
        series = f"{m.group(1)}.{m.group(2)}"
        label = m.group(4)
        rel = kb.release_of(version)
        if label == "cpu":
            print(f"{wheel.name}: CPU build, nothing to check")
            continue
        cuda = (f"{label[2:-1]}.{label[-1]}" if label else (rel.default_cuda if rel else None))
        got = measure(wheel)
        if got is None:
            print(f"{wheel.name}: no libtorch_cuda.so (not a CUDA build)")
            continue
        bulk, extra, ptx, n = got
        measured = ";".join(str(Capability.parse(a)) for a in bulk) + ("+PTX" if ptx else "")
        row = kb.arch_row(series, cuda) if cuda else None
        expected = row.arch_list if row else "(no row)"
        # the knowledge rows put +PTX on the newest arch only; compare SASS set and PTX presence
        same = row is not None and expected.replace("+PTX", "") == measured.replace("+PTX", "") and (
            ("+PTX" in expected) == ptx)
        status = "OK " if same else "DIFF"
        bad += not same
        print(f"{status} torch {version} cu{cuda.replace('.', '') if cuda else '?'}: measured {measured} "
              f"({n} entries; extra cubins {', '.join(extra) or 'none'}); knowledge {expected}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
