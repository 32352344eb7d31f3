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
release appears or a row changes, and commit its output under ``scripts/results/``.

``--pypi`` asks the package index (``--index-url``, default: pip's ``global.index-url`` or PyPI)
for torch's file list through the JSON simple API (PEP 691). That list alone gives the CPython
versions each release ships for each platform. For the newest patch of each series and each
platform it then measures one wheel **without downloading it**: HTTP range requests read the zip's
central directory, ``torch/version.py`` and ``torch/lib/libtorch_cuda.so`` only (streamed and
decompressed into one temporary file, deleted at once; about 0.2-0.5 GB is transferred per wheel).

For each wheel it reports the CUDA version the wheel was built with (``torch/version.py``; none =
a CPU build), the ELF machine of ``libtorch_cuda.so``, the arch list derived from its device code
(the plain SASS archs that carry the bulk of the kernels; the few arch-specific or family extras
such as sm_90a are listed separately), whether it has any PTX, and compares them with the
knowledge base: the release's default CUDA variant and Python versions on that platform, and the
arch row of (series, CUDA variant, platform). Exit code 1 when something disagrees.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urljoin

from packaging.version import Version

from torchkiln.arch import Capability
from torchkiln.inspect.fatbin import read_fatbins
from torchkiln.knowledge import load_knowledge, python_key

WHEEL = re.compile(
    r"^torch-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<label>\w+))?-(?P<py>cp\d+)-(?P<abi>cp\d+t?)-"
    r"(?P<plat>(?:manylinux\w*?_|linux_)(?P<machine>x86_64|aarch64))\.(?:whl|so)$"
)
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
USER_AGENT = "torchkiln-check-knowledge (+https://github.com/; range reads of one wheel member)"


# -- reading a remote wheel through HTTP range requests ----------------------------------------------
class RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests, with a read-ahead buffer.

    ``zipfile`` seeks to the central directory at the end and then reads one member sequentially:
    the read-ahead turns that into a few large requests instead of many small ones.
    """

    def __init__(self, url: str, size: int, block: int = 8 << 20) -> None:
        self.url, self.size, self.block = url, size, block
        self.pos = 0
        self.buf_start, self.buf = 0, b""
        self.transferred = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _fetch(self, start: int, n: int) -> bytes:
        end = min(self.size, start + n) - 1
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={start}-{end}", "User-Agent": USER_AGENT})
        for attempt in range(4):
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    if resp.status != 206:
                        raise OSError(f"{self.url}: the server ignored the range request (HTTP {resp.status})")
                    data: bytes = resp.read()
                    self.transferred += len(data)
                    return data
            except OSError:
                if attempt == 3:
                    raise
                time.sleep(2 * (attempt + 1))
        raise AssertionError("unreachable")

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        off = self.pos - self.buf_start
        if not (0 <= off and off + n <= len(self.buf)):
            self.buf_start, self.buf = self.pos, self._fetch(self.pos, max(n, self.block))
            off = 0
        b[:n] = self.buf[off : off + n]
        self.pos += n
        return n


@dataclass
class Measured:
    filename: str
    cuda: str | None  # torch.version.cuda of the wheel; None = CPU build
    machine: str  # ELF machine of libtorch_cuda.so ("" when there is none)
    bulk: list[str]
    extra: list[str]
    ptx: list[str]
    entries: int
    transferred: int = 0

    @property
    def arch_list(self) -> str:
        caps = [str(Capability.parse(a)) for a in self.bulk]
        if self.ptx and caps:  # knowledge rows write PTX as "+PTX" on an arch of the list
            ptx_caps = {str(Capability.parse(p)) for p in self.ptx}
            caps = [f"{c}+PTX" if c in ptx_caps else c for c in caps]
        return ";".join(caps)


def _summarise(entries: list, filename: str, cuda: str | None, machine: int) -> Measured:
    sass = Counter(e.arch for e in entries if e.kind == "sass")
    top = max(sass.values()) if sass else 0
    bulk = sorted((a for a, n in sass.items() if n >= top * 0.5), key=Capability.parse)
    extra = sorted((a for a in sass if a not in bulk), key=lambda a: (Capability.parse(a), a))
    ptx = sorted({e.arch for e in entries if e.kind == "ptx"}, key=lambda a: (Capability.parse(a), a))
    return Measured(filename, cuda, ELF_MACHINES.get(machine, str(machine)), bulk, extra, ptx, len(entries))


def _version_cuda(text: str) -> str | None:
    found = re.search(r"^cuda\b[^=]*=\s*['\"]([\d.]+)['\"]", text, re.M)
    return found.group(1) if found else None


def measure_zip(z: zipfile.ZipFile, filename: str) -> Measured:
    """Measure an open wheel: its torch/version.py and the device code of torch/lib/libtorch_cuda.so."""
    names = z.namelist()
    vpy = next((n for n in names if n == "torch/version.py"), None)
    cuda = _version_cuda(z.read(vpy).decode()) if vpy else None
    so = next((n for n in names if n == "torch/lib/libtorch_cuda.so"), None)
    if so is None:
        return Measured(filename, cuda, "", [], [], [], 0)
    with tempfile.NamedTemporaryFile(suffix=".so", dir=os.environ.get("KILN_CHECK_TMP")) as tmp:
        with z.open(so) as src:
            shutil.copyfileobj(src, tmp, 16 << 20)
        tmp.flush()
        listing = read_fatbins(tmp.name)
    return _summarise(list(listing.entries), filename, cuda, listing.machine)


def measure_remote(url: str, size: int, filename: str) -> Measured:
    raw = RangeFile(url, size)
    with zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as z:  # type: ignore[arg-type]
        got = measure_zip(z, filename)
    got.transferred = raw.transferred
    return got


def measure_local(path: Path) -> Measured:
    if path.suffix == ".so":
        listing = read_fatbins(path)
        vfile = path.parents[1] / "version.py"
        cuda = _version_cuda(vfile.read_text()) if vfile.exists() else None
        return _summarise(list(listing.entries), path.name, cuda, listing.machine)
    with zipfile.ZipFile(path) as z:
        return measure_zip(z, path.name)


# -- the package index ------------------------------------------------------------------------------
def _pip_index_url() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True).stdout.strip()
    return out or "https://pypi.org/simple/"


def index_files(index_url: str) -> list[dict]:
    """The torch project's files on an index: PEP 691 JSON where the index speaks it, else its PEP 503 HTML
    page (download.pytorch.org/whl/<variant>/torch/ serves HTML only)."""
    url = urljoin(index_url.rstrip("/") + "/", "torch/")
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1",
                                               "User-Agent": USER_AGENT})
    with urllib.request.urlopen(req, timeout=120) as resp:
        body = resp.read()
        kind = resp.headers.get("Content-Type", "")
    if "json" in kind:
        files = list(json.loads(body)["files"])
    else:
        files = []
        for href, name in re.findall(r'<a\s[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', body.decode()):
            link, _, frag = href.partition("#")
            sha = frag.removeprefix("sha256=") if frag.startswith("sha256=") else ""
            files.append({"filename": name.strip(), "url": link, "hashes": {"sha256": sha} if sha else {},
                          "size": None})
    for f in files:
        f["url"] = urljoin(url, f["url"])
    return files


def _size(url: str) -> int:
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return int(resp.headers["Content-Length"])


def _py(tag: str) -> str:
    """``cp313`` -> "3.13"; the ABI tag ``cp313t`` (a free-threaded build) -> "3.13t"."""
    return f"{tag[2]}.{tag[3:]}"


def _wheel_python(m: re.Match) -> str:
    abi = m.group("abi")
    return _py(abi) if abi.endswith("t") else _py(m.group("py"))


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
    files = [f for f in index_files(args.index_url or _pip_index_url()) if not f.get("yanked")]
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for f in files:
        m = WHEEL.match(f["filename"])
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
        got = sorted({_wheel_python(WHEEL.match(w["filename"])) for w in by[(v, plat)]}, key=python_key)
        known = (sorted(set(on.pythons(v)) - set(on.python_index_only), key=python_key) if on is not None else [])
        problems = [] if known == got else [f"Python on the index {', '.join(got)} but knowledge says "
                                            f"{', '.join(known)} (python minus python_index_only, this patch)"]
        emit(f"{'OK  ' if not problems else 'DIFF'} torch {v} {plat}: Python {', '.join(got)} (file list only)"
             + "".join(f"\n       - {p}" for p in problems))
        args.bad += bool(problems)
    for s, plat in sorted(newest, key=lambda k: (Version(k[0]), k[1])):
        version = newest[(s, plat)]
        wheels = by[(version, plat)]
        pythons = sorted({_wheel_python(WHEEL.match(w["filename"])) for w in wheels}, key=python_key)
        pick = next((w for w in wheels if "-cp311-cp311-" in w["filename"]), wheels[0])
        key = f"{pick['filename']} sha256={pick.get('hashes', {}).get('sha256', '')}"
        if key in args.cached:
            m = Measured(**args.cached[key])
        else:
            m = measure_remote(pick["url"], int(pick["size"]), pick["filename"])
            args.cached[key] = asdict(m)
            if args.cache:
                args.cache.write_text(json.dumps(args.cached, indent=1, sort_keys=True) + "\n")
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
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for f in index_files(args.variant_index):
        m = WHEEL.match(f["filename"])
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
            pythons = sorted({_wheel_python(WHEEL.match(w["filename"])) for w in wheels}, key=python_key)
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
            pick = next((w for w in wheels if "-cp311-cp311-" in w["filename"]), wheels[0])
            key = f"{pick['filename']} sha256={pick.get('hashes', {}).get('sha256', '')}"
            if key in args.cached:
                m = Measured(**args.cached[key])
            else:
                m = measure_remote(pick["url"], int(pick["size"] or _size(pick["url"])), pick["filename"])
                args.cached[key] = asdict(m)
                if args.cache:
                    args.cache.write_text(json.dumps(args.cached, indent=1, sort_keys=True) + "\n")
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
