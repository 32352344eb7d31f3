"""One finding per stage for waste rules with a per-stage fix (KL002 pip/uv caches, KL003 apt lists),
and one for the package-cache rules of a stage together (pip/uv, conda, dnf/apk caches, apt lists):
the most severe RUN leads (then the biggest cache), the others are its related findings, each with
its own rule, severity and message; other stages, other rules and suppressed RUNs keep to themselves."""

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
    # the apt lists of the same stage are part of it: one place for the stage's package caches
    assert "KL003" not in found
    assert [(r.rule, r.line, r.severity) for r in kl002.related] == [
        ("KL003", 4, "warning"), ("KL002", 5, "info"), ("KL003", 6, "warning")]
    assert "the same in 1 more RUN of this stage, line 5 (info)" in kl002.message
    assert "this stage also leaves apt lists (lines 4 (warning), 6 (warning))" in kl002.message
    assert "PIP_NO_CACHE_DIR=1" in kl002.fix
    assert "For the apt lists: " in kl002.fix and "rm -rf /var/lib/apt/lists" in kl002.fix


def test_the_biggest_cache_leads_at_equal_severity() -> None:
    # conda's package cache (line 3) comes before the apt lists (line 2) though it is later in the file
    text = ("FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\n"
            "RUN apt-get update && apt-get install -y wget\n"
            "RUN conda install -y numpy\n"
            "USER 1000\n")
    found = _by_rule(text)
    (lead,) = found["KL031"]
    assert lead.line == 3 and [(r.rule, r.line) for r in lead.related] == [("KL003", 2)] and "KL003" not in found


def test_a_single_run_keeps_its_own_message_and_fix() -> None:
    (f,) = _by_rule("FROM python:3.11-slim\nRUN pip install torch==2.5.1\nUSER 1000\n")["KL002"]
    assert f.related == () and "the same in" not in f.message and "--mount=type=cache" in f.fix


def test_a_suppressed_run_is_not_part_of_the_merge() -> None:
    text = TWO_STAGES.replace("RUN pip install ./src", "# kiln: ignore=KL002\nRUN pip install ./src")
    (f,) = _by_rule(text)["KL002"]
    assert f.line == 8 and [(r.rule, r.line) for r in f.related] == [("KL003", 4), ("KL003", 7)]


def test_reports_list_each_related_line() -> None:
    findings = tuple(lint_text(TWO_STAGES, path="Dockerfile", config=LintConfig()))
    report = LintReport(("Dockerfile",), findings)
    text = to_text(report)
    assert "    also Dockerfile:5: KL002 info: pip install" in text
    sarif = to_sarif(report)
    (res,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "KL002"]
    locs = res["relatedLocations"]
    assert [loc["physicalLocation"]["region"]["startLine"] for loc in locs] == [4, 5, 6]
    assert locs[1]["message"]["text"].startswith("KL002 info: ") and locs[0]["message"]["text"].startswith("KL003 ")


def test_each_stage_of_the_final_chain_has_its_own_finding() -> None:
    text = ("FROM python:3.11-slim AS base\nRUN pip install torch==2.5.1\n"
            "FROM base\nRUN pip install pandas==2.2.3\nUSER 1000\n")
    found = _by_rule(text)["KL002"]
    assert [(f.line, f.related) for f in found] == [(2, ()), (4, ())]
