"""Measure torch wheels on a package index without downloading them, and find what torchkiln does not know.

Shared by ``kiln knowledge update`` (which writes what it learns to the local overlay, see
``torchkiln.knowledge.overlay``) and ``scripts/check_knowledge.py`` (which compares the built-in rows
with PyPI's wheels).

An index is read as a PEP 691 JSON or PEP 503 HTML "simple" page (``https://``, ``http://``,
``file://`` or a local folder), or as a plain wheel folder (find-links). A remote wheel is read
through HTTP range requests: the zip's central directory, ``torch/version.py`` (the CUDA version it
was built with) and ``torch/lib/libtorch_cuda.so`` only, whose fat binaries give the compiled
architectures (``torchkiln.inspect.fatbin``). A companion wheel (torchvision, torchaudio) is read
for its ``METADATA`` only: the torch release it requires.
"""

from __future__ import annotations

import html.parser
import io
import json
import os
import re
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from torchkiln.arch import Capability

#: a torch wheel (or, for --installed, a library named like one)
WHEEL = re.compile(
    r"^torch-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<label>\w+))?(?:-(?P<build>\d\w*))?-(?P<py>cp\d+)-(?P<abi>cp\d+t?)-"
    r"(?P<plat>(?:manylinux\w*?_|linux_)(?P<machine>x86_64|aarch64))\.(?:whl|so)$"
)
#: a companion wheel (torchvision, torchaudio) for Linux
COMPANION_WHEEL = re.compile(
    r"^(?P<name>torchvision|torchaudio)-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<label>\w+))?-(?P<py>cp\d+)-"
    r"(?P<abi>cp\d+t?)-(?P<plat>(?:manylinux\w*?_|linux_)(?P<machine>x86_64|aarch64))\.whl$"
)
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
USER_AGENT = "torchkiln-knowledge (range reads of one wheel member)"
PYPI = "https://pypi.org/simple/"


class IndexUnreachable(OSError):
    """An index page or a wheel could not be read (the CLI turns it into a SourceError)."""


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext | None:
    return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None


def _open(url: str, headers: dict[str, str], ca_bundle: str | None, timeout: float = 120) -> Any:
    parts = urllib.parse.urlsplit(url)
    hdrs = {"User-Agent": USER_AGENT, **headers}
    if parts.username is not None:  # urllib does not send credentials from the URL itself
        import base64

        token = base64.b64encode(f"{urllib.parse.unquote(parts.username)}:"
                                 f"{urllib.parse.unquote(parts.password or '')}".encode()).decode()
        hdrs["Authorization"] = f"Basic {token}"
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    req = urllib.request.Request(url, headers=hdrs)
    return urllib.request.urlopen(req, timeout=timeout, context=_ssl_context(ca_bundle))


# -- reading a remote wheel through HTTP range requests ----------------------------------------------
class RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests, with a read-ahead buffer.

    ``zipfile`` seeks to the central directory at the end and then reads one member sequentially:
    the read-ahead turns that into a few large requests instead of many small ones. A server that
    ignores ranges (HTTP 200) is an error: reading a whole torch wheel is what this class avoids.
    """

    def __init__(self, url: str, size: int, block: int = 8 << 20, ca_bundle: str | None = None) -> None:
        self.url, self.size, self.block, self.ca_bundle = url, size, block, ca_bundle
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
        for attempt in range(4):
            try:
                with _open(self.url, {"Range": f"bytes={start}-{end}"}, self.ca_bundle) as resp:
                    if resp.status != 206:
                        raise IndexUnreachable(
                            f"{self.url}: the server ignored the range request (HTTP {resp.status})")
                    data: bytes = resp.read()
                    self.transferred += len(data)
                    return data
            except IndexUnreachable:
                raise
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


def remote_size(url: str, ca_bundle: str | None = None) -> int:
    """The size of a remote file, from a one-byte range request's Content-Range (or Content-Length)."""
    with _open(url, {"Range": "bytes=0-0"}, ca_bundle) as resp:
        total = (resp.headers.get("Content-Range") or "").rpartition("/")[2]
        if resp.status == 206 and total.isdigit():
            return int(total)
        length = resp.headers.get("Content-Length")
        if length and length.isdigit():
            return int(length)
    raise IndexUnreachable(f"{url}: the server says neither the size nor a range of the file")


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


def summarise(entries: list[Any], filename: str, cuda: str | None, machine: int) -> Measured:
    """The arch list of a library's device code: the plain SASS archs that carry the bulk of the kernels."""
    sass = Counter(e.arch for e in entries if e.kind == "sass")
    top = max(sass.values()) if sass else 0
    bulk = sorted((a for a, n in sass.items() if n >= top * 0.5 and not a.endswith(("a", "f"))),
                  key=Capability.parse)
    extra = sorted((a for a in sass if a not in bulk), key=lambda a: (Capability.parse(a), a))
    ptx = sorted({e.arch for e in entries if e.kind == "ptx"}, key=lambda a: (Capability.parse(a), a))
    return Measured(filename, cuda, ELF_MACHINES.get(machine, str(machine)), bulk, extra, ptx, len(entries))


def version_cuda(text: str) -> str | None:
    """``cuda = '13.0'`` in torch/version.py -> "13.0"; None for a CPU build."""
    found = re.search(r"^cuda\b[^=]*=\s*['\"]([\d.]+)['\"]", text, re.M)
    return found.group(1) if found else None


def measure_zip(z: zipfile.ZipFile, filename: str) -> Measured:
    """Measure an open wheel: its torch/version.py and the device code of torch/lib/libtorch_cuda.so."""
    from torchkiln.inspect.fatbin import read_fatbins

    names = z.namelist()
    vpy = next((n for n in names if n == "torch/version.py"), None)
    cuda = version_cuda(z.read(vpy).decode()) if vpy else None
    so = next((n for n in names if n == "torch/lib/libtorch_cuda.so"), None)
    if so is None:
        return Measured(filename, cuda, "", [], [], [], 0)
    with tempfile.NamedTemporaryFile(suffix=".so", dir=os.environ.get("KILN_CHECK_TMP")) as tmp:
        with z.open(so) as src:
            shutil.copyfileobj(src, tmp, 16 << 20)
        tmp.flush()
        listing = read_fatbins(tmp.name)
    return summarise(list(listing.entries), filename, cuda, listing.machine)


def _zip_of(url: str, size: int | None, ca_bundle: str | None, block: int) -> tuple[zipfile.ZipFile, RangeFile | None]:
    path = local_path(url)
    if path is not None:
        return zipfile.ZipFile(path), None
    raw = RangeFile(url, size if size is not None else remote_size(url, ca_bundle), block, ca_bundle)
    return zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)), raw


def measure_url(url: str, filename: str, size: int | None = None, ca_bundle: str | None = None) -> Measured:
    """Measure a torch wheel at a URL (range reads) or a local path / file:// URL."""
    z, raw = _zip_of(url, size, ca_bundle, 8 << 20)
    with z:
        got = measure_zip(z, filename)
    got.transferred = raw.transferred if raw is not None else 0
    return got


def measure_local(path: Path) -> Measured:
    from torchkiln.inspect.fatbin import read_fatbins

    if path.suffix == ".so":
        listing = read_fatbins(path)
        vfile = path.parents[1] / "version.py"
        cuda = version_cuda(vfile.read_text()) if vfile.exists() else None
        return summarise(list(listing.entries), path.name, cuda, listing.machine)
    with zipfile.ZipFile(path) as z:
        return measure_zip(z, path.name)


def required_torch(url: str, size: int | None = None, ca_bundle: str | None = None) -> str | None:
    """The torch version a companion wheel pins (``Requires-Dist: torch==X``); None when it pins none."""
    z, _raw = _zip_of(url, size, ca_bundle, 256 << 10)
    with z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    for line in text.splitlines():
        m = re.match(r"Requires-Dist:\s*torch\s*\(?\s*==\s*([\w.+]+)", line)
        if m:
            return m.group(1)
    return None


# -- the package index ------------------------------------------------------------------------------
@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str = ""
    size: int | None = None
    yanked: bool = False


def local_path(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    if "://" in location:
        return None
    return Path(location)


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            a = dict(attrs)
            if a.get("href"):
                self.links.append((a["href"] or "", a))


def _from_html(text: str, base: str) -> list[IndexFile]:
    parser = _Anchors()
    parser.feed(text)
    out = []
    for href, attrs in parser.links:
        url, _, frag = urljoin(base, href).partition("#")
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = frag.partition("sha256=")[2] if "sha256=" in frag else ""
        out.append(IndexFile(name, url, sha, None, "data-yanked" in attrs))
    return out


def urljoin(base: str, href: str) -> str:
    """``href`` of a page at ``base`` as an absolute URL (``file://`` pages included)."""
    return urllib.parse.urljoin(base, href)


def project_files(index: str, project: str, ca_bundle: str | None = None) -> list[IndexFile]:
    """The files of ``project`` on a simple index (PEP 691 JSON or PEP 503 HTML; URL or folder).

    An index that does not have the project gives an empty list; one that cannot be read raises
    ``IndexUnreachable``.
    """
    folder = local_path(index)
    if folder is not None:
        page = folder / project / "index.html"
        if page.is_file():
            return _from_html(page.read_text(errors="replace"), page.parent.as_uri() + "/")
        if (folder / project).is_dir() or not folder.is_dir():
            return []
        # a plain wheel folder (find-links)
        return [IndexFile(p.name, p.resolve().as_uri(), "", p.stat().st_size)
                for p in sorted(folder.glob(f"{project}-*.whl"))]
    url = urllib.parse.urljoin(index.rstrip("/") + "/", f"{project}/")
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    try:
        with _open(url, {"Accept": accept}, ca_bundle) as resp:
            ctype = resp.headers.get("Content-Type", "")
            body = resp.read()
            final = resp.geturl()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise IndexUnreachable(f"{url}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise IndexUnreachable(f"{url}: {getattr(e, 'reason', e)}") from e
    if "json" in ctype:
        data = json.loads(body)
        return [IndexFile(f["filename"], urllib.parse.urljoin(final, f["url"]), f.get("hashes", {}).get("sha256", ""),
                          f.get("size"), bool(f.get("yanked")))
                for f in data.get("files", [])]
    return _from_html(body.decode("utf-8", "replace"), final)


def python_of(tag: str) -> str:
    """``cp311`` -> ``3.11``."""
    return f"{tag[2]}.{tag[3:]}"


# -- what an index has that the knowledge base lacks --------------------------------------------------
@dataclass
class Group:
    """The wheels of one torch version, variant label and platform on one index."""

    version: str
    label: str  # "" = the index's default build (no local version label), else "cpu", "cu130", ...
    platform: str
    index: str
    files: list[IndexFile] = field(default_factory=list)

    @property
    def pythons(self) -> list[str]:
        return sorted({python_of(m.group("py")) for f in self.files if (m := WHEEL.match(f.filename))
                       and not m.group("abi").endswith("t")}, key=Version)

    @property
    def freethreaded(self) -> list[str]:
        return sorted({python_of(m.group("py")) for f in self.files if (m := WHEEL.match(f.filename))
                       and m.group("abi").endswith("t")}, key=Version)

    def pick(self) -> IndexFile:
        """The wheel measured: cp311 where there is one (every release since 2.0 has it), else the first."""
        plain = [f for f in self.files if (m := WHEEL.match(f.filename)) and not m.group("abi").endswith("t")]
        pool = plain or self.files
        # the highest build tag (a re-upload such as torch-2.10.0-3-...) is what pip installs
        pool = sorted(pool, key=lambda f: -build_number(f.filename))
        return next((f for f in pool if "-cp311-cp311-" in f.filename), pool[0])


def build_number(filename: str) -> int:
    m = WHEEL.match(filename)
    build = m.group("build") if m else None
    return int(re.match(r"\d+", build).group()) if build else 0  # type: ignore[union-attr]


def torch_groups(files: Iterable[IndexFile], index: str, oldest: str = "2.0") -> dict[tuple[str, str, str], Group]:
    """(version, label, platform) -> Group, for final releases of ``oldest`` or newer (no pre-releases)."""
    out: dict[tuple[str, str, str], Group] = {}
    for f in files:
        m = WHEEL.match(f.filename)
        if not m or f.yanked or not f.filename.endswith(".whl"):
            continue
        try:
            v = Version(m.group("version"))
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or v < Version(oldest):
            continue
        key = (m.group("version"), m.group("label") or "", m.group("machine"))
        out.setdefault(key, Group(*key, index=index)).files.append(f)
    return out


def variant_cuda(label: str) -> str | None:
    """``cu130`` -> "13.0", ``cpu`` -> "cpu", "" / others -> None (unknown before measuring)."""
    if label == "cpu":
        return "cpu"
    m = re.fullmatch(r"cu(\d+)(\d)", label)
    return f"{int(m.group(1))}.{m.group(2)}" if m else None


def companion_versions(files: Iterable[IndexFile], platform: str) -> dict[tuple[str, str], IndexFile]:
    """(version, label) -> one cp311 (or first) Linux wheel of a companion, for reading its METADATA."""
    picked: dict[tuple[str, str], IndexFile] = {}
    for f in files:
        m = COMPANION_WHEEL.match(f.filename)
        if not m or f.yanked or m.group("machine") != platform or m.group("abi").endswith("t"):
            continue
        try:
            v = Version(m.group("version"))
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease:
            continue
        key = (m.group("version"), m.group("label") or "")
        if key not in picked or "-cp311-" in f.filename:
            picked[key] = f
    return picked


Log = Callable[[str], None]


# -- learning what the knowledge base lacks -----------------------------------------------------------
@dataclass
class UpdateReport:
    """What ``update_overlay`` read, learned and wrote."""

    path: Path
    indexes: list[str]
    learned: list[Any]  # LearnedWheel
    companions: list[Any]  # LearnedCompanion
    notes: list[str]
    written: bool
    seconds: float = 0.0
    transferred: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "overlay": str(self.path), "written": self.written, "indexes": self.indexes,
            "learned": [w.model_dump() for w in self.learned],
            "companions": [c.model_dump() for c in self.companions],
            "notes": self.notes, "seconds": round(self.seconds, 1), "transferred_bytes": self.transferred,
        }


def _mask(url: str) -> str:
    from torchkiln.redact import redact

    return redact(url)


def _local_sha256(url: str) -> str:
    """The sha256 of a wheel in a local folder (a find-links folder's listing has none); "" for a remote one."""
    import hashlib

    path = local_path(url)
    if path is None or not path.is_file():
        return ""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _known(kb: Any, g: Group) -> bool:
    """Whether the knowledge base (built-in + overlay) already describes this group of wheels."""
    if g.version not in kb.all_patches():
        return False
    if g.label == "":
        return True
    cuda = variant_cuda(g.label)
    if cuda is None or cuda == "cpu":  # ROCm/XPU builds are not torchkiln's; every release has a CPU build
        return True
    rel = kb.release_of(g.version)
    plat = rel.on(g.platform) if rel is not None else None
    return plat is not None and cuda in plat.variants


def update_overlay(
    indexes: list[str],
    *,
    ca_bundle: str | None = None,
    platforms: tuple[str, ...] = ("x86_64", "aarch64"),
    reset: bool = False,
    path: Path | None = None,
    log: Log = lambda _line: None,
) -> UpdateReport:
    """Read ``indexes`` (URLs, ``file://`` URLs or folders) for torch wheels the knowledge base does not
    describe, measure one wheel of each new (version, variant, platform), pair new releases with
    their torchvision / torchaudio, and write the overlay. Raises ``SourceError`` when an index cannot
    be read; nothing is written then.
    """
    from torchkiln.errors import SourceError
    from torchkiln.knowledge import load_knowledge
    from torchkiln.knowledge.overlay import (
        LearnedCompanion,
        LearnedWheel,
        Overlay,
        apply_overlay,
        now,
        overlay_path,
        read_overlay,
        write_overlay,
    )

    started = time.monotonic()
    path = path or overlay_path()
    overlay = Overlay() if reset else read_overlay(path)
    builtin = load_knowledge()
    kb = apply_overlay(builtin, overlay, path)
    notes: list[str] = []
    learned: list[LearnedWheel] = []
    transferred = 0
    stamp = now()
    listings: dict[str, list[IndexFile]] = {}
    for index in indexes:
        try:
            listings[index] = project_files(index, "torch", ca_bundle)
        except IndexUnreachable as e:
            raise SourceError(
                f"cannot read the package index {_mask(index)} for torch's releases: {_mask(str(e))}.",
                hint="Check the index URL and the network (or --ca-bundle for a private certificate); "
                     "`kiln knowledge update` needs the indexes online. Nothing was written.",
            ) from None
        log(f"{_mask(index)}: {len(listings[index])} torch files")
    seen: set[tuple[str, str, str]] = {(w.version, w.label, w.platform) for w in overlay.wheels}
    for index, files in listings.items():
        groups = torch_groups(files, _mask(index))
        for key in sorted(groups, key=lambda k: (Version(k[0]), k[1], k[2])):
            g = groups[key]
            if g.platform not in platforms or key in seen or _known(kb, g):
                continue
            seen.add(key)
            f = g.pick()
            log(f"measuring {f.filename} ({_mask(index)})")
            try:
                m = measure_url(f.url, f.filename, f.size, ca_bundle)
            except (OSError, zipfile.BadZipFile, ValueError) as e:
                raise SourceError(f"cannot measure {_mask(f.url)}: {_mask(str(e))}.",
                                  hint="Check that the index serves the wheel and answers HTTP range requests; "
                                       "nothing was written.") from None
            transferred += m.transferred
            cuda = m.cuda or "cpu"
            want = variant_cuda(g.label)
            if want is not None and want != cuda:
                notes.append(f"{f.filename}: its label says {want} but torch/version.py says {cuda}; "
                             "recorded as measured")
            if m.cuda and m.machine != g.platform:
                notes.append(f"{f.filename}: libtorch_cuda.so is built for {m.machine}, not {g.platform}; skipped")
                continue
            sha = f.sha256 or _local_sha256(f.url)
            learned.append(LearnedWheel(
                version=g.version, platform=g.platform, label=g.label, cuda=cuda, index=_mask(index),  # type: ignore[arg-type]
                python=g.pythons, python_freethreaded=g.freethreaded, arch_list=m.arch_list, extra=m.extra,
                ptx=m.ptx, filename=f.filename, url=_mask(f.url), sha256=sha, learned=stamp))
            log(f"  {g.version}{'+' + g.label if g.label else ''} {g.platform}: "
                f"{'cu' + cuda.replace('.', '') if cuda != 'cpu' else 'CPU build'}"
                f"{' SASS ' + m.arch_list if m.arch_list else ''}; Python {', '.join(g.pythons)}"
                f"{f' [{m.transferred / 1e6:.0f} MB read]' if m.transferred else ''}")
    new = Overlay(format=1, updated=stamp, indexes=sorted({*overlay.indexes, *(_mask(i) for i in indexes)}),
                  wheels=[*overlay.wheels, *learned], companions=list(overlay.companions))
    kb = apply_overlay(builtin, new, path)

    def paired_by_row(pkg: str, v: str) -> bool:
        rel = kb.release_of(v)
        return pkg == "torchvision" and rel is not None and v in rel.torchvision

    lacking = {(pkg, v) for v in kb.all_patches() for pkg in ("torchvision", "torchaudio")
               if kb.companion(pkg, v) is None and not paired_by_row(pkg, v)}
    companions: list[LearnedCompanion] = []
    if lacking:
        for index in listings:
            for pkg in ("torchvision", "torchaudio"):
                if not any(p == pkg for p, _ in lacking):
                    continue
                try:
                    files = project_files(index, pkg, ca_bundle)
                except IndexUnreachable as e:
                    notes.append(f"{_mask(index)}: {pkg} not read ({_mask(str(e))})")
                    continue
                known_versions = {c.version for c in kb.companions if c.package == pkg}
                for (version, _label), f in sorted(companion_versions(files, "x86_64").items() or
                                                   companion_versions(files, "aarch64").items(),
                                                   key=lambda kv: (Version(kv[0][0]), kv[0][1])):
                    if version in known_versions:
                        continue
                    try:
                        torch = required_torch(f.url, f.size, ca_bundle)
                    except (OSError, zipfile.BadZipFile) as e:
                        notes.append(f"{f.filename}: METADATA not read ({_mask(str(e))})")
                        continue
                    torch = (torch or (version if pkg == "torchaudio" else "")).split("+")[0]
                    if (pkg, torch) in lacking:
                        lacking.discard((pkg, torch))
                        known_versions.add(version)
                        companions.append(LearnedCompanion(
                            torch=torch, package=pkg, version=version, index=_mask(index),
                            filename=f.filename, url=_mask(f.url), sha256=f.sha256, learned=stamp))
                        log(f"  {pkg} {version} goes with torch {torch} ({f.filename})")
    for pkg, v in sorted(lacking):
        if v in {w.version for w in new.wheels}:
            notes.append(f"no {pkg} for torch {v} on these indexes: a plan asking for it is refused")
    written = False
    if learned or companions or reset:
        new.companions.extend(companions)
        write_overlay(new, path)
        written = True
    return UpdateReport(path=path, indexes=[_mask(i) for i in indexes], learned=learned, companions=companions,
                        notes=notes, written=written, seconds=time.monotonic() - started, transferred=transferred)
