"""One finding per stage for waste rules with a per-stage fix (KL002 pip/uv caches, KL003 apt lists):
the most severe RUN leads, the others are its related findings, each with its own severity and
message; other stages, other rules and suppressed RUNs keep to themselves."""

from __future__ import annotations

from torchkiln.lint import LintConfig, lint_text
from torchkiln.lint.check import LintReport
from torchkiln.lint.report import to_sarif, to_text

TWO_STAGES = (
    "FROM python:3.11-slim AS build\n"
    "RUN pip install numpy==2.1.0\n"                      # 2: build stage, not the final image's
    "FROM python:3.11-slim\n"
    "RUN apt-get update && apt-get install -y git\n"     # 4: KL003
    "RUN pip install ./src\n"                              # 5: KL002, a local tree (info)
    "RUN apt-get update && apt-get install -y ffmpeg\n"  # 6: KL003
    "RUN pip install torch==2.5.1\n"                      # 7: KL002, GBs (warning)
    "USER 1000\n"
)


def _by_rule(text: str, config: LintConfig | None = None) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in lint_text(text, config=config or LintConfig()):
        out.setdefault(f.rule, []).append(f)
    return out


def test_the_most_severe_run_leads_and_the_others_are_related() -> None:
    found = _by_rule(TWO_STAGES)
    (kl002,) = found["KL002"]
    assert kl002.line == 7 and kl002.severity == "warning"
    assert [(r.rule, r.line, r.severity) for r in kl002.related] == [("KL002", 5, "info")]
    assert "the same in 1 more RUN of this stage, line 5 (info)" in kl002.message
    assert "PIP_NO_CACHE_DIR=1" in kl002.fix
    (kl003,) = found["KL003"]
    assert kl003.line == 4 and [r.line for r in kl003.related] == [6] and "rm -rf /var/lib/apt/lists" in kl003.fix


def test_a_single_run_keeps_its_own_message_and_fix() -> None:
    (f,) = _by_rule("FROM python:3.11-slim\nRUN pip install torch==2.5.1\nUSER 1000\n")["KL002"]
    assert f.related == () and "the same in" not in f.message and "--mount=type=cache" in f.fix


def test_a_suppressed_run_is_not_part_of_the_merge() -> None:
    text = TWO_STAGES.replace("RUN pip install ./src", "# kiln: ignore=KL002\nRUN pip install ./src")
    (f,) = _by_rule(text)["KL002"]
    assert f.related == () and f.line == 8


def test_reports_list_each_related_line() -> None:
    findings = tuple(lint_text(TWO_STAGES, path="Dockerfile", config=LintConfig()))
    report = LintReport(("Dockerfile",), findings)
    text = to_text(report)
    assert "    also Dockerfile:5: KL002 info: pip install" in text
    sarif = to_sarif(report)
    (res,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "KL002"]
    (loc,) = res["relatedLocations"]
    assert loc["physicalLocation"]["region"]["startLine"] == 5 and loc["message"]["text"].startswith("KL002 info: ")


def test_each_stage_of_the_final_chain_has_its_own_finding() -> None:
    text = ("FROM python:3.11-slim AS base\nRUN pip install torch==2.5.1\n"
            "FROM base\nRUN pip install pandas==2.2.3\nUSER 1000\n")
    found = _by_rule(text)["KL002"]
    assert [(f.line, f.related) for f in found] == [(2, ()), (4, ())]
