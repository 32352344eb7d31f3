"""The conditions a RUN's commands run under, and the findings a default build never reaches."""

from __future__ import annotations

from torchkiln.lint import LintConfig, lint_text
from torchkiln.lint.model import Snippet
from torchkiln.lint.shell import commands, evaluate_test


def _guards(text: str) -> list[tuple[str, list[tuple[str | None, bool]]]]:
    out = []
    for c in commands(Snippet(text, tuple(range(1, text.count("\n") + 2)), None, 0)):
        if c.words:
            out.append((" ".join(c.argv), [(" ".join(w.text for w in g.test) if g.test else None, g.holds)
                                           for g in c.guards]))
    return out


def test_if_branches_and_and_or_lists_carry_their_tests() -> None:
    got = dict(_guards('if [ "$A" = 1 ]; then pip install x; else pip install y; fi\n'
                       '[ -n "$B" ] && pip install z || echo no\n'
                       '[ "$C" = 1 ] || pip install v && pip install u\n'
                       'for i in 1 2; do pip install w; done\n'
                       'if foo; then pip install p; elif [ x ]; then pip install q; fi'))
    assert got["pip install x"] == [("[ $A = 1 ]", True)]
    assert got["pip install y"] == [("[ $A = 1 ]", False)]
    assert got["pip install z"] == [("[ -n $B ]", True)]
    assert got["echo no"] == [(None, False)]  # runs when the test failed or when pip failed
    assert got["pip install v"] == [("[ $C = 1 ]", False)]
    assert got["pip install u"] == [(None, True)]  # after `||`: either branch reaches it
    assert got["pip install w"] == []
    assert got["pip install p"] == [(None, True)]  # not a test: not followed
    assert got["pip install q"] == [(None, True)]  # an elif: not followed


def test_an_if_left_open_gives_no_guards() -> None:
    # `... sources.list fi` has no `;` before fi: the if never closes (a syntax error, KL028)
    assert all(g == [] for _, g in _guards('if [ "$TZ" = x ]; then sed -i s/a/b/ f fi && apt-get update'))


def test_test_values() -> None:
    from torchkiln.lint.shell import tokenize

    def val(text: str, values: dict[str, str | None]) -> bool | None:
        toks = [t for t in tokenize(text, False) if t.kind == "word"]
        return evaluate_test(toks, lambda w: values.get(w[1:].strip("{}"), None) if w.startswith("$") else w)

    assert val('[ "$A" = "True" ]', {"A": ""}) is False
    assert val('[ "$A" != "True" ]', {"A": ""}) is True
    assert val('[ -n "$A" ]', {"A": ""}) is False
    assert val('[ -z "$A" ]', {"A": ""}) is True
    assert val('[ "$A" ]', {"A": "x"}) is True
    assert val('[[ $A == tr* ]]', {"A": "true"}) is None  # a pattern
    assert val('test ! "$A" = 1', {"A": "1"}) is False
    assert val('[ "$A" = 1 ]', {}) is None  # unknown
    assert val('[ "$A" -eq 1 ]', {"A": "1"}) is None  # not read


def _find(text: str) -> list[tuple[int, str, str, str]]:
    """Each finding, and each related line of a merged one (the same pip cache at several RUNs of a
    stage) with its own severity and message."""
    out = []
    for f in lint_text(text, config=LintConfig()):
        out.append((f.line, f.rule, f.severity, f.message.split("; the same in ")[0]))
        out += [(r.line, r.rule, r.severity, r.message) for r in f.related]
    return out


HEAD = ("FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\n"
        "RUN apt-get update && apt-get install -y python3-pip && rm -rf /var/lib/apt/lists/*\n")


def test_a_branch_the_default_arguments_skip_is_info_and_says_so() -> None:
    text = HEAD + ('ARG USE_GPU\nARG EXTRAS=0\n'
                   'RUN if [ "$USE_GPU" = "True" ]; then pip3 install opencv-python==4.10.0.84; fi\n'
                   'RUN [ "$EXTRAS" = "1" ] && pip3 install scipy==1.14.1 || echo skipped\n'
                   'RUN if [ "$EXTRAS" = "0" ]; then pip3 install torch==2.5.1; fi\n')
    found = {line: (sev, msg) for line, rule, sev, msg in _find(text) if rule == "KL002"}
    assert found[5][0] == "info" and '`[ "$USE_GPU" = "True" ]` is false' in found[5][1]
    assert found[6][0] == "info" and "--build-arg" in found[6][1]
    assert "skips" not in found[7][1]  # the default takes this branch


def test_unknown_values_leave_the_finding_alone() -> None:
    text = HEAD + ('ARG FLAG\n'
                   'RUN if [ -n "$TARGETARCH" ]; then pip3 install opencv-python==4.10.0.84; fi\n'  # the platform's
                   'RUN if [ "$CUDA_VERSION" = "x" ]; then pip3 install scipy==1.14.1; fi\n'  # the base's ENV
                   'RUN FLAG=1 && if [ "$FLAG" = 1 ]; then pip3 install pandas==2.2.3; fi\n')  # set here
    found = [msg for _, rule, _, msg in _find(text) if rule == "KL002"]
    assert len(found) == 3 and not any("skips" in m for m in found)
