"""Learning a torch release from an index: `kiln knowledge update` against a local index, then `kiln resolve`.

The index is a real HTTP server on 127.0.0.1 (the stdlib's, taught HTTP range requests as PyPI's CDN
answers them) serving a PEP 503 simple page of a made-up newer release, torch 2.99.0: small wheels whose
``torch/lib/libtorch_cuda.so`` is a real fat binary built by nvcc (tests/fixtures/fatbin/multi.so:
SASS sm_75, sm_80, sm_90, sm_90a and PTX compute_90) and whose ``torch/version.py`` names the CUDA
version. Nothing here reaches the network.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torchkiln.cli import main
from torchkiln.errors import InputError
from torchkiln.knowledge import load_knowledge
from torchkiln.knowledge.learn import project_files
from torchkiln.knowledge.overlay import (
    LearnedWheel,
    Overlay,
    apply_overlay,
    current_knowledge,
    overlay_path,
    read_overlay,
    write_overlay,
)

FATBIN = Path(__file__).parents[1] / "fixtures" / "fatbin" / "multi.so"
SOURCE_VARS = ("KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS", "KILN_TORCH_INDEX", "KILN_CA_BUNDLE")


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with single-range GETs (HTTP 206), counting what it sends."""

    sent: list[tuple[str, int, bool]]  # (path, bytes, ranged)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        rng = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if rng is None or not path.is_file():
            if path.is_file():
                self.sent.append((self.path, path.stat().st_size, False))
            super().do_GET()
            return
        size = path.stat().st_size
        start_s, _, end_s = rng.removeprefix("bytes=").partition("-")
        start, end = int(start_s), min(int(end_s) if end_s else size - 1, size - 1)
        with path.open("rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.sent.append((self.path, len(data), True))


@dataclass
class LocalIndex:
    root: Path
    url: str
    sent: list[tuple[str, int, bool]] = field(default_factory=list)
    sha256: dict[str, str] = field(default_factory=dict)


def _torch_wheel(folder: Path, name: str, cuda: str | None) -> Path:
    path = folder / name
    version = name.split("-")[1]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("torch/__init__.py", "")
        z.writestr("torch/version.py", f"__version__ = '{version}'\ncuda: Optional[str] = "
                                       f"{repr(cuda) if cuda else 'None'}\n")
        if cuda:
            z.write(FATBIN, "torch/lib/libtorch_cuda.so")
        z.writestr(f"torch-{version.split('+')[0]}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return path


def _companion_wheel(folder: Path, name: str, torch: str) -> Path:
    path = folder / name
    pkg, version = name.split("-")[:2]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}-{version.split('+')[0]}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\nRequires-Dist: numpy\n"
                   f"Requires-Dist: torch=={torch}\n")
    return path


def _page(index: LocalIndex, simple: str, project: str, files: list[Path]) -> None:
    page = index.root / simple / project / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    links = []
    for f in files:
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        index.sha256[f.name] = digest
        href = f"../../files/{f.name}".replace("+", "%2B")
        links.append(f'<a href="{href}#sha256={digest}">{f.name}</a>')
    page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    """simple/ (the default index: torch 2.99.0, a cu130 build, cp311 and cp312, and torchvision 0.99.0)
    and cu126/ (PyTorch-style variant index: torch 2.99.0+cu126)."""
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    files.mkdir()
    plat = "manylinux_2_28_x86_64"
    default = [_torch_wheel(files, f"torch-2.99.0-{py}-{py}-{plat}.whl", "13.0") for py in ("cp311", "cp312")]
    old = _torch_wheel(files, f"torch-2.14.1-cp311-cp311-{plat}.whl", "13.0")  # known: never measured
    cu126 = [_torch_wheel(files, f"torch-2.99.0+cu126-cp311-cp311-{plat}.whl", "12.6")]
    vision = _companion_wheel(files, f"torchvision-0.99.0-cp311-cp311-{plat}.whl", "2.99.0")
    vision126 = _companion_wheel(files, f"torchvision-0.99.0+cu126-cp311-cp311-{plat}.whl", "2.99.0+cu126")
    handler = functools.partial(_RangeHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    host, port = server.server_address[:2]
    index = LocalIndex(root, f"http://{host!s}:{port}")
    _RangeHandler.sent = index.sent
    _page(index, "simple", "torch", [*default, old])
    _page(index, "simple", "torchvision", [vision])
    _page(index, "cu126", "torch", cu126)
    _page(index, "cu126", "torchvision", [vision126])
    thread = threading.Thread(target=functools.partial(server.serve_forever, poll_interval=0.05), daemon=True)
    thread.start()
    yield index
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in SOURCE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _spec(tmp_path: Path, version: str, cuda: str = "auto", packages: tuple[str, ...] = ()) -> Path:
    p = tmp_path / "kiln.toml"
    p.write_text(f'[image]\nname = "learned"\n\n[python]\nversion = "3.11"\n\n[torch]\nversion = "{version}"\n'
                 f'cuda = "{cuda}"\npackages = {json.dumps(list(packages))}\n\n[gpu]\ntargets = ["H100"]\n')
    return p


def test_update_learns_a_newer_release_and_resolve_plans_it(capsys, tmp_path: Path, cache: Path,
                                                            local_index: LocalIndex) -> None:
    spec = _spec(tmp_path, "2.99.0")
    # before: unknown, and the error names the command that learns it
    code, _, err = run(capsys, "resolve", str(spec))
    assert code == 4 and "not a release torchkiln knows" in err and "kiln knowledge update" in err

    local_index.sent.clear()
    code, out, err = run(capsys, "knowledge", "update", "--index-url", f"{local_index.url}/simple/",
                         "--torch-index", f"{local_index.url}/cu126/", "--platform", "linux/amd64", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["written"] and report["overlay"] == str(cache / "knowledge" / "overlay.json")
    rows = {(w["version"], w["label"]): w for w in report["learned"]}
    assert set(rows) == {("2.99.0", ""), ("2.99.0", "cu126")}  # 2.14.1 is known: not measured
    default = rows[("2.99.0", "")]
    assert default["cuda"] == "13.0" and default["python"] == ["3.11", "3.12"] and default["platform"] == "x86_64"
    # the arch list comes from the fat binary itself: SASS 7.5, 8.0, 9.0 (sm_90a apart) and PTX of 9.0
    assert default["arch_list"] == "7.5;8.0;9.0+PTX" and default["extra"] == ["sm_90a"]
    wheel = "torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert default["filename"] == wheel and default["sha256"] == local_index.sha256[wheel]
    assert default["url"] == f"{local_index.url}/files/{wheel}"
    assert rows[("2.99.0", "cu126")]["cuda"] == "12.6"
    assert [(c["package"], c["version"], c["torch"]) for c in report["companions"]] == [
        ("torchvision", "0.99.0", "2.99.0")]
    # the wheels were read by range requests only, never sent whole
    whl = [(p, n, ranged) for p, n, ranged in local_index.sent if p.endswith(".whl")]
    assert whl and all(ranged for _, _, ranged in whl)

    # resolve now plans it, from the overlay, and says so
    code, out, err = run(capsys, "resolve", str(spec), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["torch_requirement"] == "torch==2.99.0" and plan["cuda"] == "13.0"
    assert plan["wheel_arch_list"] == "7.5;8.0;9.0+PTX"
    assert plan["targets"][0]["covered"]
    code, out, _ = run(capsys, "explain", str(spec), "--json")
    decisions = {d["topic"]: d for d in json.loads(out)["decisions"]}
    assert str(cache / "knowledge" / "overlay.json") in decisions["knowledge"]["choice"]
    assert decisions["torch"]["source"].startswith("LEARNED (") and local_index.sha256[wheel] in decisions[
        "torch"]["source"]
    code, out, _ = run(capsys, "explain", str(spec))
    assert code == 0 and "LEARNED" in out and "overlay" in out

    # the learned variant and companion plan too: the companion of a labelled torch is that variant's build
    code, out, err = run(capsys, "resolve", str(_spec(tmp_path, "2.99.0", "12.6", ("torchvision",))), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["torch_requirement"] == "torch==2.99.0+cu126"
    assert plan["companions"] == ["torchvision==0.99.0+cu126"]

    # a second update finds nothing new and measures nothing
    local_index.sent.clear()
    code, out, _ = run(capsys, "knowledge", "update", "--index-url", f"{local_index.url}/simple/",
                       "--torch-index", f"{local_index.url}/cu126/", "--json")
    assert code == 0 and not json.loads(out)["written"] and json.loads(out)["learned"] == []
    assert not any(p.endswith(".whl") for p, _, _ in local_index.sent)
    code, out, _ = run(capsys, "knowledge", "show", "--json")
    assert code == 0 and len(json.loads(out)["wheels"]) == 2
    # the built-in rows are untouched: a spec without the overlay still stops at the built-in newest
    assert "2.99.0" not in load_knowledge().all_patches()


def test_unreachable_index_is_a_source_error_and_writes_nothing(capsys, cache: Path) -> None:
    code, _, err = run(capsys, "knowledge", "update", "--index-url", "http://127.0.0.1:9/simple/")
    assert code == 9 and "cannot read the package index" in err and "Traceback" not in err
    assert not overlay_path().exists()


def test_corrupt_overlay_names_the_file_and_the_fix(capsys, tmp_path: Path, cache: Path,
                                                    local_index: LocalIndex) -> None:
    path = overlay_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 1, "wheels": [{"version": "2.99.0"}]}')
    code, _, err = run(capsys, "resolve", str(_spec(tmp_path, "2.14.1")))
    assert code == 7 and str(path) in err and "kiln knowledge update --reset" in err and "Traceback" not in err
    with pytest.raises(InputError):
        read_overlay(path)
    path.write_text("not json at all")
    code, _, err = run(capsys, "knowledge", "show")
    assert code == 7 and "corrupt" in err
    # --reset replaces it with what the index has
    code, out, err = run(capsys, "knowledge", "update", "--reset", "--index-url", f"{local_index.url}/simple/",
                         "--platform", "linux/amd64", "--json")
    assert code == 0, err
    assert [w.version for w in read_overlay(path).wheels] == ["2.99.0"]


def test_overlay_writes_are_atomic_and_leave_no_temporary_file(cache: Path) -> None:
    ov = Overlay(updated="2026-11-26T00:00:00+00:00")
    path = write_overlay(ov)
    write_overlay(ov)
    assert [p.name for p in path.parent.iterdir()] == ["overlay.json"]
    assert read_overlay(path) == ov


def _wheel(version: str, label: str, cuda: str, platform: str = "x86_64", arch: str = "") -> LearnedWheel:
    return LearnedWheel(version=version, platform=platform, label=label, cuda=cuda, index="http://i/simple/",  # type: ignore[arg-type]
                        python=["3.11", "3.12"], arch_list=arch, filename=f"torch-{version}.whl",
                        url=f"http://i/files/torch-{version}.whl", sha256="ab" * 32, learned="2026-11-26T00:00:00")


def test_apply_adds_patches_and_variants_but_built_in_rows_win() -> None:
    kb = load_knowledge()
    ov = Overlay(wheels=[
        _wheel("2.14.2", "", "13.0", arch="5.0"),  # a new patch of a known series; its arch row is built in
        _wheel("2.15.0", "cu134", "13.4", arch="7.5;8.0;8.6;9.0;10.0;12.0"),  # a new variant of a known release
        _wheel("2.15.0", "", "12.8"),  # disagrees with the built-in default: ignored
    ])
    got = apply_overlay(kb, ov, "/x/overlay.json")
    rel = got.release_of("2.14.2")
    assert rel is not None and "2.14.2" in rel.patches and rel.learned["2.14.2"].startswith("LEARNED (http://i/")
    assert got.arch_row("2.14", "13.0").arch_list == kb.arch_row("2.14", "13.0").arch_list  # built in wins
    r215 = got.release_of("2.15.0")
    assert r215.default_cuda == "13.2" and "13.4" in r215.variants and "13.4" in r215.on("x86_64").variants
    assert got.arch_row("2.15", "13.4").source.startswith("LEARNED")
    assert got.overlay == "/x/overlay.json" and kb.overlay == ""
    # a new series learned from variant indexes only (no default build) is not added: what a plain
    # install gets is unknown
    assert apply_overlay(kb, Overlay(wheels=[_wheel("2.98.0", "cu130", "13.0")])).release_of("2.98.0") is None


def test_current_knowledge_is_the_built_in_rows_without_an_overlay(cache: Path) -> None:
    assert current_knowledge() is load_knowledge()


def test_index_pages_are_read_as_pep503_folders(local_index: LocalIndex) -> None:
    files = project_files(str(local_index.root / "simple"), "torch")
    assert sorted(f.filename for f in files)[0].startswith("torch-2.14.1")
    assert all(f.url.startswith("file://") and f.sha256 for f in files)
    assert project_files(str(local_index.root / "simple"), "no-such-project") == []
    assert os.path.exists(files[0].url.removeprefix("file://"))


def test_lock_learns_from_the_specs_own_indexes_first(capsys, tmp_path: Path, cache: Path,
                                                       local_index: LocalIndex) -> None:
    from torchkiln.building.sources import SourceLayer
    from torchkiln.cli.knowledge import learn_before_lock
    from torchkiln.runner import Runner

    spec = _spec(tmp_path, "2.99.0")
    spec.write_text(spec.read_text() + f'\n[sources]\nindex_url = "{local_index.url}/simple/"\n')
    learn_before_lock(spec, SourceLayer("flag"), False, Runner(), quiet=False)
    assert "learned torch 2.99.0 x86_64" in capsys.readouterr().err
    assert [(w.version, w.platform) for w in read_overlay().wheels] == [("2.99.0", "x86_64")]  # the spec's platform
    assert run(capsys, "resolve", str(spec))[0] == 0
    # an index that cannot be read is a warning there (uv's own resolution reports it), not an error
    bad = _spec(tmp_path, "2.14.1")
    bad.write_text(bad.read_text() + '\n[sources]\nindex_url = "http://127.0.0.1:9/simple/"\n')
    learn_before_lock(bad, SourceLayer("flag"), False, Runner(), quiet=False)
    assert "knowledge not updated" in capsys.readouterr().err


def test_local_folders_are_indexes_too(capsys, cache: Path, local_index: LocalIndex) -> None:
    """A PEP 503 folder as the index and a plain wheel folder (find-links): read from disk, hashed here."""
    code, out, err = run(capsys, "knowledge", "update", "--index-url", str(local_index.root / "simple"),
                         "--find-links", str(local_index.root / "files"), "--platform", "linux/amd64", "--json")
    assert code == 0, err
    learned = {(w["version"], w["label"], w["url"].startswith("file://")): w for w in json.loads(out)["learned"]}
    assert set(learned) == {("2.99.0", "", True), ("2.99.0", "cu126", True)}
    for w in learned.values():
        assert w["sha256"] == local_index.sha256[w["filename"]]
