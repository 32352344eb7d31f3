"""The committed corpus measurement (docs/lint-corpus/) is complete and consistent: every file has
its origin, every verdict is a known kind with a reason and names a real rule, and the precision the
verdicts give meets the target. (The Dockerfiles themselves are other projects' files and are not
committed; `scripts/lint_corpus.py DIR` re-runs the measurement on a folder holding them.)"""

from __future__ import annotations

import csv
from pathlib import Path

from torchkiln.lint import RULES

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "docs" / "lint-corpus"


def _rows(name: str) -> list[dict[str, str]]:
    with (CORPUS / name).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_manifest_names_at_least_30_files_with_their_origin() -> None:
    rows = _rows("manifest.tsv")
    assert len(rows) >= 30
    assert len({r["file"] for r in rows}) == len(rows)
    for r in rows:
        assert r["repo"] and r["path"] and r["commit"], r
    resolved = [r for r in rows if len(r["commit"]) == 40]
    assert len(resolved) >= 30


def test_verdicts_are_complete_and_meet_the_precision_target() -> None:
    files = {r["file"] for r in _rows("manifest.tsv")}
    rows = _rows("verdicts.tsv")
    assert rows
    for r in rows:
        assert r["file"] in files, r
        assert int(r["line"]) >= 1
        assert r["rule"] in RULES, r
        assert r["verdict"] in ("true", "debatable", "false"), r
        assert len(r["why"]) > 20, r
    true = sum(r["verdict"] == "true" for r in rows)
    false = sum(r["verdict"] == "false" for r in rows)
    assert true / len(rows) >= 0.80
    assert false / len(rows) <= 0.03


def test_the_docs_carry_the_generated_measurement() -> None:
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    block = doc.split("<!-- lint_corpus:start", 1)[1].split("<!-- lint_corpus:end -->", 1)[0]
    rows = _rows("verdicts.tsv")
    assert f"{len(rows)} verdicts" in block


def test_the_heldout_set_is_complete_and_separate_from_the_corpus() -> None:
    """The held-out files (judged after the corpus, on rules not tuned on them) have their origin and
    valid verdicts, none of them is in the first corpus, and docs/lint.md carries their measurement."""
    rows = _rows("heldout.tsv")
    assert len(rows) >= 12
    files = {r["file"] for r in rows}
    assert len(files) == len(rows)
    assert not files & {r["file"] for r in _rows("manifest.tsv")}
    assert not {(r["repo"], r["path"]) for r in rows} & {(r["repo"], r["path"]) for r in _rows("manifest.tsv")}
    for r in rows:
        assert r["repo"] and r["path"] and len(r["commit"]) == 40, r
    verdicts = _rows("heldout-verdicts.tsv")
    assert verdicts
    for r in verdicts:
        assert r["file"] in files, r
        assert int(r["line"]) >= 1
        assert r["rule"] in RULES, r
        assert r["verdict"] in ("true", "debatable", "false"), r
        assert len(r["why"]) > 20, r
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    block = doc.split("<!-- lint_heldout:start", 1)[1].split("<!-- lint_heldout:end -->", 1)[0]
    assert f"{len(verdicts)} verdicts" in block
    assert f"{len(rows)} public ML/CUDA Dockerfiles" in block


def test_issue29_split_is_fixed_separate_judged_and_measured() -> None:
    """Issue 29's split: public files with their origin, none in the earlier sets, every verdict and
    recorded miss valid, the whole corpus at least 100 files from 80 repositories, and docs/lint.md
    carrying the split's generated measurement."""
    rows = [r for r in _rows("heldout2.tsv") if not r["file"].startswith("#")]
    assert len(rows) >= 40
    files = {r["file"] for r in rows}
    assert len(files) == len(rows)
    earlier = _rows("manifest.tsv") + _rows("heldout.tsv")
    assert not files & {r["file"] for r in earlier}
    assert not {(r["repo"], r["path"]) for r in rows} & {(r["repo"], r["path"]) for r in earlier}
    for r in rows:
        assert r["repo"] and r["path"] and len(r["commit"]) == 40, r
    everything = rows + earlier
    assert len(everything) >= 100
    assert len({r["repo"] for r in everything if "/" in r["repo"]}) >= 80
    verdicts = _rows("heldout2-verdicts.tsv")
    keys = [(r["file"], r["line"], r["rule"]) for r in verdicts]
    assert len(keys) == len(set(keys))
    for r in verdicts:
        assert r["file"] in files, r
        assert int(r["line"]) >= 1 and r["rule"] in RULES, r
        assert r["verdict"] in ("true", "debatable", "false"), r
        assert len(r["why"]) > 20, r
    # the baseline (verdicts taken before the rule changes) is kept: 137 findings
    assert sum(not r["why"].startswith("[judged after") for r in verdicts) == 137
    misses = _rows("heldout2-misses.tsv")
    assert misses
    for m in misses:
        assert m["file"] in files and int(m["line"]) >= 1, m
        assert m["rule"] == "-" or m["rule"] in RULES, m
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    block = doc.split("<!-- lint_heldout2:start", 1)[1].split("<!-- lint_heldout2:end -->", 1)[0]
    assert f"{len(rows)} public ML/CUDA Dockerfiles" in block
    assert "Before the changes: **137 findings" in block


def test_heldout3_split_is_fixed_before_the_changes_judged_and_measured() -> None:
    """The split fixed on 2026-11-28 before that round's rule changes: at least 35 public files from
    30 repositories none of the earlier splits use, the baseline verdicts (97 findings) kept as taken,
    every finding after the changes judged in heldout3-after-verdicts.tsv, the misses valid, and
    docs/lint.md carrying the generated measurement."""
    raw = _rows("heldout3.tsv")
    assert raw[0]["file"].startswith("#") and "2026-11-28 before any rule change" in raw[0]["file"]
    rows = [r for r in raw if not r["file"].startswith("#")]
    assert len(rows) >= 35 and len({r["repo"] for r in rows}) >= 30
    files = {r["file"] for r in rows}
    assert len(files) == len(rows)
    earlier = _rows("manifest.tsv") + _rows("heldout.tsv") + _rows("heldout2.tsv")
    assert not {r["repo"] for r in rows} & {r["repo"] for r in earlier}
    for r in rows:
        assert "/" in r["repo"] and r["path"] and len(r["commit"]) == 40, r
    for name in ("heldout3-verdicts.tsv", "heldout3-after-verdicts.tsv"):
        verdicts = [r for r in _rows(name) if not r["file"].startswith("#")]
        keys = [(r["file"], r["line"], r["rule"]) for r in verdicts]
        assert len(keys) == len(set(keys)), name
        for r in verdicts:
            assert r["file"] in files and int(r["line"]) >= 1 and r["rule"] in RULES, r
            assert r["verdict"] in ("true", "debatable", "false") and len(r["why"]) > 20, r
    assert len(_rows("heldout3-verdicts.tsv")) == 97
    for m in _rows("heldout3-misses.tsv"):
        assert m["file"] in files and int(m["line"]) >= 1, m
        assert m["rule"] == "-" or m["rule"] in RULES, m
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    block = doc.split("<!-- lint_heldout3:start", 1)[1].split("<!-- lint_heldout3:end -->", 1)[0]
    assert f"{len(rows)} public ML/CUDA Dockerfiles" in block
    assert "Before the changes: **97 findings" in block


def test_overturned_verdicts_name_a_true_verdict_a_rule_and_a_reason() -> None:
    """Every entry of overturned.tsv (a true verdict the rules no longer report on purpose) names a real
    rule, a verdict that exists and is true, and why."""
    verdicts: dict[tuple[str, str, str], str] = {}
    for name in ["verdicts.tsv", *(p.name for p in CORPUS.glob("heldout*verdicts.tsv"))]:
        for r in _rows(name):
            if not r["file"].startswith("#"):
                verdicts[(r["file"], r["line"], r["rule"])] = r["verdict"]
    rows = [r for r in _rows("overturned.tsv") if not r["file"].startswith("#")]
    assert rows
    for r in rows:
        assert r["rule"] in RULES, r
        assert verdicts.get((r["file"], r["line"], r["rule"])) == "true", r
        assert len(r["why"]) > 20, r


def test_heldout11_split_is_separate_judged_and_measured() -> None:
    """Session 13's split, committed (9bcf402) before that session's rule changes: 40 files from 40
    repositories no earlier split uses, every finding of the rules before and after judged once (a
    known verdict with a reason, a real rule), the misses valid, docs/lint.md carrying the block."""
    raw = _rows("heldout11.tsv")
    assert raw[0]["file"].startswith("#") and "before any verdict" in raw[0]["file"]
    rows = [r for r in raw if not r["file"].startswith("#")]
    assert len(rows) == 40 and len({r["repo"] for r in rows}) == 40
    files = {r["file"] for r in rows}
    earlier = [r for name in ["manifest.tsv", "heldout.tsv", *(f"heldout{i}.tsv" for i in range(2, 11))]
               for r in _rows(name) if not r["file"].startswith("#")]
    assert not {r["repo"] for r in rows} & {r["repo"] for r in earlier}
    for r in rows:
        assert "/" in r["repo"] and r["path"] and len(r["commit"]) == 40, r
    verdicts = [r for r in _rows("heldout11-verdicts.tsv") if not r["file"].startswith("#")]
    keys = [(r["file"], r["line"], r["rule"]) for r in verdicts]
    assert len(keys) == len(set(keys)) and len(keys) >= 85
    for r in verdicts:
        assert r["file"] in files and int(r["line"]) >= 1 and r["rule"] in RULES, r
        assert r["verdict"] in ("true", "debatable", "false") and len(r["why"]) > 20, r
    for m in _rows("heldout11-misses.tsv"):
        assert m["file"] in files and int(m["line"]) >= 1, m
        assert m["rule"] == "-" or m["rule"] in RULES, m
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    block = doc.split("<!-- lint_heldout11:start", 1)[1].split("<!-- lint_heldout11:end -->", 1)[0]
    assert "40 public ML/CUDA Dockerfiles" in block and "Before the changes: **84 findings" in block
