"""Whatever text comes in, the linter returns findings or raises InputError: never a traceback."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.errors import InputError
from torchkiln.lint import lint_text

FIXTURES = Path(__file__).resolve().parents[1] / "lint_fixtures"
CORPUS = [
    line
    for p in sorted((FIXTURES / "rules").glob("*.Dockerfile")) + sorted((FIXTURES / "seeds").glob("*.Dockerfile"))
    for line in p.read_text().splitlines()
]
PIECES = ["\\", "<<EOF", "EOF", "'", '"', ";", "&&", "$(", "${", "`", "#", "--mount=type=cache", "\t", "=", " "]


def lint_or_input_error(text: str) -> None:
    try:
        findings = lint_text(text)
    except InputError as e:
        assert e.message and e.hint is not None
        return
    for f in findings:
        assert f.line >= 1 and f.rule.startswith("KL")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=25))
def test_shuffled_fixture_lines(lines: list[str]) -> None:
    lint_or_input_error("\n".join(lines) + "\n")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(CORPUS), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from(PIECES)), max_size=6),
)
def test_fixture_lines_with_stray_shell_characters(lines: list[str], edits: list[tuple[int, str]]) -> None:
    text = "FROM python:3.11-slim-bookworm\n" + "\n".join(lines) + "\n"
    for pos, piece in edits:
        pos = min(pos, len(text))
        text = text[:pos] + piece + text[pos:]
    lint_or_input_error(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    lint_or_input_error(text)
