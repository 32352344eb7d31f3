"""Findings on steps a build never reaches: after a command the build fails at for certain (a deleted
base tag, a shell syntax error), the findings on the rest of that stage and on every stage built on it
are reported inside the stop's finding, at info; what runs before it, and stages that do not need it,
keep their own findings and severity."""

from __future__ import annotations

from torchkiln.lint import LintConfig, lint_text


def _sev(text: str, config: LintConfig | None = None) -> dict[tuple[str, int], str]:
    """(rule, line) -> severity of every finding, and of every finding reported inside another (as
    `inside:SEVERITY`)."""
    out = {}
    for f in lint_text(text, config=config or LintConfig()):
        out[(f.rule, f.line)] = f.severity
        out.update({(r.rule, r.line): f"inside:{r.severity}" for r in f.related})
    return out


def _messages(text: str) -> dict[tuple[str, int], str]:
    return {(f.rule, f.line): f.message for f in lint_text(text, config=LintConfig())}


DELETED = "nvidia/cuda:11.1-runtime-ubuntu20.04"  # a two-part tag NVIDIA deleted (KL044)


def test_a_deleted_base_makes_its_stage_and_the_stages_on_it_info() -> None:
    chain = (
        f"FROM {DELETED} AS cuda\n"
        "RUN apt-get update && apt-get install -y python3-pip\n"   # 2: KL003
        "FROM cuda\n"
        "RUN pip3 install opencv-python\n"                          # 4: KL002, FROM the failed stage
        "USER 1000\n"
    )
    sev = _sev(chain)
    assert sev[("KL044", 1)] == "error"
    assert sev[("KL003", 2)] == "inside:info" and sev[("KL002", 4)] == "inside:info"
    note = _messages(chain)[("KL044", 1)]
    assert "2 findings on the steps after it" in note and "KL003 line 2, KL002 line 4" in note
    assert "once this is fixed" in note
    final = "FROM python:3.11-slim\n{}RUN pip install opencv-python\nUSER 1000\n"
    old = f"FROM {DELETED} AS old\nRUN mkdir /x\n"
    # a stage the final one does not need is never built: the final stage keeps its warning
    assert _sev(old + final.format(""))[("KL002", 4)] == "warning"
    # one it copies from is: the copy fails, and the final stage with it
    assert _sev(old + final.format("COPY --from=old /x /x\n"))[("KL002", 5)] == "inside:info"


def test_a_syntax_error_leaves_what_runs_before_it() -> None:
    text = (
        "FROM python:3.11-slim\n"
        "RUN apt-get update && apt-get install -y git\n"     # 2: runs, its layer exists
        "RUN if true; then echo unfinished\n"                # 3: KL028, the build stops here
        "RUN pip install opencv-python\n"                    # 4: never runs
        "USER 1000\n"
    )
    sev = _sev(text)
    assert sev[("KL028", 3)] == "error"
    assert sev[("KL003", 2)] == "warning"
    assert sev[("KL002", 4)] == "inside:info"
    # a [severity] setting still wins over the demotion
    assert _sev(text, LintConfig(severity={"KL002": "error"}))[("KL002", 4)] == "inside:error"


def test_without_a_stop_nothing_changes() -> None:
    text = "FROM python:3.11-slim\nRUN pip install opencv-python\nUSER 1000\n"
    assert _sev(text) == {("KL002", 2): "warning"}
    assert "never gets here" not in _messages(text)[("KL002", 2)]
