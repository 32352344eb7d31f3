"""`kiln lint` end to end through the CLI's error boundary: exit codes, formats, config, stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchkiln.cli import main
from torchkiln.errors import ExitCode

FIXTURES = Path(__file__).resolve().parents[1] / "lint_fixtures"
RULES = FIXTURES / "rules"


def test_clean_file_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(RULES / "KL002.pass.Dockerfile")]) == ExitCode.OK
    assert "1 file checked: 0 error(s), 0 warning(s), 0 info" in capsys.readouterr().out


def test_findings_exit_1_and_fail_on_moves_the_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    warn_only = str(RULES / "KL002.fail.Dockerfile")
    assert main(["lint", warn_only]) == ExitCode.CHECK_FAILED
    out = capsys.readouterr().out
    assert "KL002 warning" in out and "fix:" in out
    assert main(["lint", "--fail-on", "error", warn_only]) == ExitCode.OK
    assert main(["lint", "--fail-on", "error", str(RULES / "KL006.fail.Dockerfile")]) == ExitCode.CHECK_FAILED
    # info never fails the run
    assert main(["lint", str(RULES / "KL012.fail.Dockerfile")]) == ExitCode.OK


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["lint", "--format", "json", str(RULES / "KL013.fail.Dockerfile")])
    data = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.CHECK_FAILED
    assert [(f["rule"], f["severity"], f["line"]) for f in data["findings"]] == [
        ("KL013", "error", 6),
        ("KL013", "error", 8),
    ]
    assert main(["lint", "--json", str(RULES / "KL013.pass.Dockerfile")]) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_sarif_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kiln.sarif"
    rc = main(["lint", "-f", "sarif", "-o", str(out), str(FIXTURES / "seeds")])
    assert rc == ExitCode.CHECK_FAILED
    doc = json.loads(out.read_text())
    results = doc["runs"][0]["results"]
    assert doc["version"] == "2.1.0" and len(results) > 25
    # a merged finding (the same pip cache at several RUNs of a stage) names its other lines
    related = [r for r in results if r.get("relatedLocations")]
    assert related and all(
        loc["physicalLocation"]["region"]["startLine"] != r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in related for loc in r["relatedLocations"]
    )
    assert capsys.readouterr().out == ""  # the summary goes to stderr


def test_malformed_file_exits_input_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["lint", str(FIXTURES / "malformed" / "unterminated-heredoc.Dockerfile")])
    err = capsys.readouterr().err
    assert rc == ExitCode.INPUT
    assert "heredoc <<EOF is never closed" in err and "fix:" in err and "Traceback" not in err


def test_unreadable_file_among_good_ones(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["lint", "--json", str(RULES / "KL002.fail.Dockerfile"), str(FIXTURES / "malformed" / "empty.Dockerfile")]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.INPUT
    # KL002.fail's four pip caches are in one stage: one finding, its other three lines related
    (kl002,) = [f for f in data["findings"] if f["rule"] == "KL002"]
    assert len(data["findings"]) == 1 and len(kl002["related"]) == 3 and "empty" in data["errors"][0]["message"]


def test_missing_path_and_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(tmp_path / "nope")]) == ExitCode.INPUT
    assert "no such file" in capsys.readouterr().err
    assert main(["lint", str(tmp_path)]) == ExitCode.INPUT
    assert "no Dockerfile" in capsys.readouterr().err
    assert main(["lint"]) == ExitCode.INPUT


def test_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "lint.toml"
    cfg.write_text('ignore = ["KL002"]\nfail-on = "error"\n[severity]\nKL003 = "error"\n')
    assert main(["lint", "--config", str(cfg), str(RULES / "KL002.fail.Dockerfile")]) == ExitCode.OK
    assert main(["lint", "--config", str(cfg), str(RULES / "KL003.fail.Dockerfile")]) == ExitCode.CHECK_FAILED
    assert "KL003 error" in capsys.readouterr().out
    cfg.write_text('ignore = ["KL999"]\n')
    assert main(["lint", "--config", str(cfg), str(RULES / "KL002.fail.Dockerfile")]) == ExitCode.INPUT
    assert "unknown rule id 'KL999'" in capsys.readouterr().err
    cfg.write_text("ignroe = []\n")
    assert main(["lint", "--config", str(cfg), str(RULES / "KL002.fail.Dockerfile")]) == ExitCode.INPUT
    assert "unknown key(s) 'ignroe'" in capsys.readouterr().err


def test_default_config_in_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".kiln-lint.toml").write_text('ignore = ["KL002"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["lint", str(RULES / "KL002.fail.Dockerfile")]) == ExitCode.OK


def test_target_option(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(RULES / "KL001.pass.Dockerfile")
    assert main(["lint", path]) == ExitCode.OK
    assert main(["lint", "--target", "build", path]) == ExitCode.CHECK_FAILED
    assert "KL001" in capsys.readouterr().out
    assert main(["lint", "--target", "nope", path]) == ExitCode.INPUT


def test_list_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--list-rules", "--json"]) == ExitCode.OK
    rules = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rules][:3] == ["KL001", "KL002", "KL003"]
    assert all(r["why"] and r["fix"] and r["source"] for r in rules)


def test_stdin() -> None:
    text = (RULES / "KL003.fail.Dockerfile").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "torchkiln", "lint", "-q", "-"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == ExitCode.CHECK_FAILED
    assert proc.stdout.startswith("<stdin>:4: KL003 warning")
