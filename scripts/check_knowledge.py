#!/usr/bin/env python3
"""Check the knowledge base's torch rows against real wheels, with our own fat-binary reader.

    python scripts/check_knowledge.py --pypi                      # every release series, x86_64 and aarch64
    python scripts/check_knowledge.py --pypi --series 2.13 2.14 --platform aarch64
    python scripts/check_knowledge.py --pypi --out scripts/results/check_knowledge.txt
    python scripts/check_knowledge.py --variant-index https://download.pytorch.org/whl/cu126 --platform aarch64
    python scripts/check_knowledge.py WHEEL_OR_FOLDER...          # local wheel files or folders
    python scripts/check_knowledge.py --pip-config                # the folders pip is configured with
    python scripts/check_knowledge.py --installed                 # this Python's own torch

Needs the network for ``--pypi`` and is therefore not part of the test suite; run it by hand when a
release appears or a row changes, and commit its output under ``scripts/results/``. (The scheduled
``pytest -m network tests/network`` checks the newest series and what PyPI has that the rows lack.)
The reading and measuring are ``torchkiln.knowledge.learn``'s, shared with ``kiln knowledge update``.

``--pypi`` asks the package index (``--index-url``, default: pip's ``global.index-url`` or PyPI)
for torch's file list through the JSON simple API (PEP 691). That list alone gives the CPython
versions each release ships for each platform. For the newest patch of each series and each
platform it then measures one wheel **without downloading it**: HTTP range requests read the zip's
central directory, ``torch/version.py`` and ``torch/lib/libtorch_cuda.so`` only (streamed and
decompressed into one temporary file, deleted at once; about 0.2-0.5 GB is transferred per wheel).
Of a wheel re-uploaded with a build tag (``torch-2.10.0-3-...``) the highest build is measured: pip installs it.

For each wheel it reports the CUDA version the wheel was built with (``torch/version.py``; none =
a CPU build), the ELF machine of ``libtorch_cuda.so``, the arch list derived from its device code
(the plain SASS archs that carry the bulk of the kernels; the few arch-specific or family extras
such as sm_90a are listed separately), whether it has any PTX, and compares them with the
knowledge base: the release's default CUDA variant and Python versions on that platform, and the
arch row of (series, CUDA variant, platform). Exit code 1 when something disagrees.
"""


from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from packaging.version import Version

from torchkiln.knowledge import load_knowledge, python_key
from torchkiln.knowledge.learn import (  # the measuring is the package's, shared with `kiln knowledge update`
    PYPI,
    WHEEL,
    Measured,
    build_number,
    measure_local,
    measure_url,
    project_files,
    python_of,
)


def _pip_index_url() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True).stdout.strip()
    return out or PYPI


def _wheel_python(m: re.Match) -> str:
    """The Python of a wheel's tags: ``cp313-cp313`` -> "3.13"; a free-threaded ``cp313-cp313t`` -> "3.13t"."""
    abi = m.group("abi")
    return python_of(abi) if abi.endswith("t") else python_of(m.group("py"))


# -- comparing with the knowledge base --------------------------------------------------------------
def compare(kb, version: str, platform: str, m: Measured, pythons: list[str] | None) -> list[str]:
    """What disagrees between a measured wheel and the knowledge rows (empty = all agree)."""
    problems: list[str] = []
    rel = kb.release_of(version)
    if rel is None:
        return [f"torch {version} is not in the knowledge base"]
    plat = rel.platforms.get(platform)
    if plat is None:
        return [f"the knowledge base has no {platform} wheels for torch {rel.series}"]
    if pythons is not None:
        known = sorted(set(plat.pythons(version)) - set(plat.python_index_only), key=python_key)  # those on PyPI
        if known != pythons:
            problems.append(f"Python on the index {', '.join(pythons)} but knowledge says {', '.join(known)} "
                            "(python minus python_index_only)")
    default = m.cuda or "cpu"
    if "+" not in m.filename.split("-")[1] and plat.default_cuda != default:
        problems.append(f"the index's default build is {default}, knowledge says {plat.default_cuda}")
    if m.cuda is None:
        return problems
    if m.machine != platform:
        problems.append(f"libtorch_cuda.so is built for {m.machine}, not {platform}")
    row = kb.arch_row(rel.series, m.cuda, platform)
    if row is None:
        problems.append(f"no arch row for {rel.series} cu{m.cuda.replace('.', '')} {platform}")
        return problems
    want = row.arch_list
    if want.replace("+PTX", "") != m.arch_list.replace("+PTX", ""):
        problems.append(f"SASS {m.arch_list.replace('+PTX', '')} but the row says {want.replace('+PTX', '')}")
    if ("+PTX" in want) != bool(m.ptx):
        problems.append(f"PTX {'/'.join(m.ptx) or 'none'} but the row says {'PTX' if '+PTX' in want else 'none'}")
    if "MEASURED" not in row.source:
        problems.append(f"the row agrees but does not say MEASURED (source: {row.source})")
    return problems


def _line(version: str, platform: str, m: Measured, problems: list[str], pythons: list[str] | None) -> str:
    what = (f"cu{m.cuda.replace('.', '')} {m.machine}: SASS {m.arch_list or 'none'} "
            f"(extra cubins {', '.join(m.extra) or 'none'}; PTX {', '.join(m.ptx) or 'none'}; {m.entries} entries)"
            if m.cuda else "CPU build (no CUDA in torch/version.py)")
    py = f"; Python {', '.join(pythons)}" if pythons else ""
    status = "OK  " if not problems else "DIFF"
    out = f"{status} torch {version} {platform} {m.filename}: {what}{py}"
    if m.transferred:
        out += f" [{m.transferred / 1e6:.0f} MB read]"
    for p in problems:
        out += f"\n       - {p}"
    return out


def run_pypi(args: argparse.Namespace, kb, emit) -> int:
    files = [f for f in project_files(args.index_url or _pip_index_url(), "torch") if not f.yanked]
    by: dict[tuple[str, str], list] = defaultdict(list)
    for f in files:
        m = WHEEL.match(f.filename)
        if m and not m.group("label"):
            by[(m.group("version"), m.group("machine"))].append(f)
    series_of = {v: ".".join(v.split(".")[:2]) for v, _ in by}
    wanted_series = set(args.series) if args.series else {r.series for r in kb.releases}
    newest: dict[tuple[str, str], str] = {}
    for (v, plat) in by:
        s = series_of[v]
        if s in wanted_series and plat in args.platform:
            if (s, plat) not in newest or Version(v) > Version(newest[(s, plat)]):
                newest[(s, plat)] = v
    # every patch's Python set (the file list alone: nothing is downloaded), so a Python a later patch
    # dropped (3.13t after 2.12.0) is checked against the row's python_until too
    for v, plat in sorted(by, key=lambda k: (Version(k[0]), k[1])):
        if series_of[v] not in wanted_series or plat not in args.platform or (series_of[v], plat) not in newest \
                or newest[(series_of[v], plat)] == v:
            continue
        rel = kb.release_of(v)
        on = rel.platforms.get(plat) if rel is not None else None
        got = sorted({_wheel_python(WHEEL.match(w.filename)) for w in by[(v, plat)]}, key=python_key)
        known = (sorted(set(on.pythons(v)) - set(on.python_index_only), key=python_key) if on is not None else [])
        problems = [] if known == got else [f"Python on the index {', '.join(got)} but knowledge says "
                                            f"{', '.join(known)} (python minus python_index_only, this patch)"]
        emit(f"{'OK  ' if not problems else 'DIFF'} torch {v} {plat}: Python {', '.join(got)} (file list only)"
             + "".join(f"\n       - {p}" for p in problems))
        args.bad += bool(problems)
    for s, plat in sorted(newest, key=lambda k: (Version(k[0]), k[1])):
        version = newest[(s, plat)]
        wheels = by[(version, plat)]
        pythons = sorted({_wheel_python(WHEEL.match(w.filename)) for w in wheels}, key=python_key)
        m = _measure_one(args, wheels)
        problems = compare(kb, version, plat, m, pythons)
        emit(_line(version, plat, m, problems, pythons))
        args.bad += bool(problems)
    return 1 if args.bad else 0


def run_variant_index(args: argparse.Namespace, kb, emit) -> int:
    """PyTorch's index of one variant (``--variant-index https://download.pytorch.org/whl/cu126``): which
    releases have wheels of that variant per platform, against the rows' variants (a row that names a variant
    the index lacks is a plan naming a wheel that does not exist), and, with ``--measure``, the newest wheel of
    each series measured like PyPI's."""
    variant = args.variant_index.rstrip("/").rsplit("/", 1)[-1]  # "cu126"
    cuda = f"{variant[2:-1]}.{variant[-1]}" if variant.startswith("cu") else "cpu"
    by: dict[tuple[str, str], list] = defaultdict(list)
    for f in project_files(args.variant_index, "torch"):
        m = WHEEL.match(f.filename)
        if m and m.group("label") == variant:
            by[(m.group("version"), m.group("machine"))].append(f)
    wanted_series = set(args.series) if args.series else {r.series for r in kb.releases}
    for v in kb.all_patches():
        rel = kb.release_of(v)
        if rel is None or rel.series not in wanted_series:
            continue
        for plat_name in args.platform:
            plat = rel.on(plat_name)
            since = plat.variants_from.get(cuda) if plat is not None else None
            claims = plat is not None and cuda in plat.variants and (since is None or Version(v) >= Version(since))
            wheels = by.get((v, plat_name), [])
            pythons = sorted({_wheel_python(WHEEL.match(w.filename)) for w in wheels}, key=python_key)
            if claims == bool(wheels):
                status, why = "OK  ", ""
            elif claims:
                status = "DIFF"
                why = f"\n       - the row names {variant} for {plat_name}, but the index has no such wheel"
            else:
                status, why = "DIFF", f"\n       - the index has {variant} wheels the row does not name"
            emit(f"{status} torch {v} {plat_name} {variant}: "
                 f"{'Python ' + ', '.join(pythons) if wheels else 'no wheels'} (index file list){why}")
            args.bad += status == "DIFF"
    if args.measure:
        newest: dict[tuple[str, str], str] = {}
        for (v, plat_name) in by:
            s = ".".join(v.split(".")[:2])
            if s in wanted_series and plat_name in args.platform:
                if (s, plat_name) not in newest or Version(v) > Version(newest[(s, plat_name)]):
                    newest[(s, plat_name)] = v
        for (_s, plat_name), v in sorted(newest.items(), key=lambda k: (Version(k[0][0]), k[0][1])):
            wheels = by[(v, plat_name)]
            m = _measure_one(args, wheels)
            problems = compare(kb, v, plat_name, m, None)
            emit(_line(v, plat_name, m, problems, None))
            args.bad += bool(problems)
    return 1 if args.bad else 0


def _local_wheels(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        if p.is_file() and WHEEL.match(p.name):
            found.append(p)
        elif p.is_dir():
            found += [w for w in p.rglob("torch-*.whl") if WHEEL.match(w.name)]
    return sorted(set(found))


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
    link = Path(tempfile.mkdtemp()) / f"torch-{dist.version.split('+')[0]}-cp311-cp311-manylinux_2_28_x86_64.so"
    link.symlink_to(so)
    return [link]


def _measure_one(args: argparse.Namespace, wheels: list[Any]) -> Measured:
    """Measure the cp311 wheel of a release (else its first), from the cache when its name and sha256 are there;
    of a rebuilt release (build tags), the highest build, which pip installs."""
    wheels = sorted(wheels, key=lambda w: -build_number(w.filename))
    pick = next((w for w in wheels if "-cp311-cp311-" in w.filename), wheels[0])
    key = f"{pick.filename} sha256={pick.sha256}"
    if key in args.cached:
        return Measured(**args.cached[key])
    m = measure_url(pick.url, pick.filename, pick.size)
    args.cached[key] = asdict(m)
    if args.cache:
        args.cache.write_text(json.dumps(args.cached, indent=1, sort_keys=True) + "\n")
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="wheel files or folders")
    ap.add_argument("--pypi", action="store_true", help="measure the package index's wheels (network)")
    ap.add_argument("--index-url", help="the index for --pypi (default: pip's global.index-url, else PyPI)")
    ap.add_argument("--variant-index", metavar="URL",
                    help="PyTorch's index of one variant, e.g. https://download.pytorch.org/whl/cu126: which releases "
                    "have that variant per platform, against the rows (network)")
    ap.add_argument("--measure", action="store_true",
                    help="with --variant-index: also measure the newest wheel of each series (range reads)")
    ap.add_argument("--series", nargs="*", help="only these release series, e.g. 2.13 2.14")
    ap.add_argument("--platform", nargs="*", default=["x86_64", "aarch64"], choices=["x86_64", "aarch64"])
    ap.add_argument("--pip-config", action="store_true", help="also search the folders pip is configured with")
    ap.add_argument("--installed", action="store_true", help="check the torch installed in this Python")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    ap.add_argument("--cache", type=Path,
                    help="JSON file of measurements by wheel name and sha256: re-runs compare without downloading")
    args = ap.parse_args()
    args.bad = 0
    args.cached = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}
    kb = load_knowledge()
    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    started = time.monotonic()
    if args.variant_index:
        rc = run_variant_index(args, kb, emit)
    elif args.pypi:
        rc = run_pypi(args, kb, emit)
    else:
        wheels = _local_wheels(list(args.paths) + (_pip_folders() if args.pip_config else []))
        if args.installed:
            wheels += _installed()
        if not wheels:
            print("no torch wheels found (give wheel files or folders, --pip-config, --installed or --pypi)",
                  file=sys.stderr)
            return 2
        for w in wheels:
            m = WHEEL.match(w.name)
            assert m is not None
            got = measure_local(w)
            problems = compare(kb, m.group("version"), m.group("machine"), got, None)
            emit(_line(m.group("version"), m.group("machine"), got, problems, None))
            args.bad += bool(problems)
        rc = 1 if args.bad else 0
    emit(f"# {len(lines)} wheels, {args.bad} with differences, {time.monotonic() - started:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
