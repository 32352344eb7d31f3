"""The knowledge rows still agree with what scripts/check_knowledge.py measured on PyPI's wheels.

The measurements are committed (scripts/results/check_knowledge_cache.json); this re-compares them with
the current rows offline, so that an edited row that contradicts a measured wheel fails here.
"""

import importlib.util
import json
import re
import sys
from pathlib import Path

from torchkiln.knowledge import learn, load_knowledge
from torchkiln.knowledge.learn import project_files

ROOT = Path(__file__).parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("check_knowledge", ROOT / "scripts" / "check_knowledge.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_knowledge"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_rows_agree_with_the_measured_wheels() -> None:
    ck = _script()
    kb = load_knowledge()
    cache = json.loads((ROOT / "scripts" / "results" / "check_knowledge_cache.json").read_text())
    assert len(cache) == 33  # 30 of 2026-11-24, 2.15.0 x2, the 2.10.0-3 rebuild
    for record in cache.values():
        m = ck.Measured(**record)
        name = ck.WHEEL.match(m.filename)
        assert name is not None
        assert ck.compare(kb, name.group("version"), name.group("machine"), m, None) == [], m.filename
    aarch64 = [ck.Measured(**r) for k, r in cache.items() if "aarch64" in k]
    assert {m.cuda for m in aarch64 if re.match(r"torch-2\.1[1-4]", m.filename)} == {"13.0"}
    assert all(m.machine == "aarch64" for m in aarch64 if m.cuda)  # our fat-binary reader on Arm ELF files


class _Resp:
    def __init__(self, body: bytes, kind: str, url: str = "") -> None:
        self.body, self.headers, self.url = body, {"Content-Type": kind}, url

    def read(self) -> bytes:
        return self.body

    def geturl(self) -> str:
        return self.url

    def __enter__(self):
        return self

    def __exit__(self, *a) -> None:
        return None


_SHA = "993e0e99c472df1d2746c3233ef8e88d992904fe75b8996a2c15439c43ff46c4"
_CU126_NAMES = [("torch-2.6.0+cu126-cp312-cp312-linux_aarch64.whl", _SHA),
                ("torch-2.6.0+cu126-cp313-cp313t-manylinux_2_28_x86_64.whl", "ab"),
                ("torch-2.14.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl", "")]
_CU126_HTML = ("<html><body>\n" + "".join(
    f'<a href="/whl/cu126/{n.replace("+", "%2B")}{"#sha256=" + h if h else ""}">{n}</a><br/>\n'
    for n, h in _CU126_NAMES) + "</body></html>").encode()


def _serve(monkeypatch, html: bytes) -> None:
    """PyTorch's index, as torchkiln.knowledge.learn (which the script reads indexes with) sees it."""
    monkeypatch.setattr(learn.urllib.request, "urlopen",
                        lambda req, timeout=0, context=None: _Resp(html, "text/html", req.full_url))


def _variant_run(monkeypatch, html: bytes, series: list[str], platforms: list[str]) -> tuple[int, list[str]]:
    import argparse

    ck = _script()
    _serve(monkeypatch, html)
    lines: list[str] = []
    args = argparse.Namespace(variant_index="https://download.pytorch.org/whl/cu126", series=series,
                              platform=platforms, measure=False, bad=0, cached={}, cache=None)
    return ck.run_variant_index(args, load_knowledge(), lines.append), lines


def test_variant_index_html_listing_against_the_rows(monkeypatch) -> None:
    """PyTorch's index serves PEP 503 HTML: its wheel names (linux_aarch64 ones too) and sha256 fragments are read,
    and each release's row is checked for naming exactly the variants the index has."""
    ck = _script()
    _serve(monkeypatch, _CU126_HTML)
    files = project_files("https://download.pytorch.org/whl/cu126", "torch")  # the script reads indexes with it
    assert files[0].url == ("https://download.pytorch.org/whl/cu126/torch-2.6.0%2Bcu126-cp312-cp312-"
                            "linux_aarch64.whl")
    assert files[0].sha256.startswith("993e0e99")
    assert ck.WHEEL.match(files[0].filename).group("machine") == "aarch64"
    rc, lines = _variant_run(monkeypatch, _CU126_HTML, ["2.6"], ["x86_64", "aarch64"])
    assert rc == 0, lines
    assert any(line.startswith("OK   torch 2.6.0 aarch64 cu126: Python 3.12") for line in lines)
    assert any("torch 2.6.0 x86_64 cu126: Python 3.13t" in line for line in lines)


def test_variant_index_finds_a_row_naming_a_missing_wheel(monkeypatch) -> None:
    html = _CU126_HTML.replace(b"linux_aarch64", b"linux_s390x")  # no aarch64 wheel left
    rc, lines = _variant_run(monkeypatch, html, ["2.6"], ["aarch64"])
    assert rc == 1 and any("the row names cu126 for aarch64, but the index has no such wheel" in ln for ln in lines)
