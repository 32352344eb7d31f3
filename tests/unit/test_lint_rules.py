"""Every rule against its fixtures: each `*.fail.*` file must give exactly the findings its
`# expect: KLnnn` comments announce (a marker names the rule found on the next non-marker line, by
its own finding or as a related line of a merged one),
each `*.pass.*` file none at all. The realistic seeds in `seeds/` are checked the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchkiln.lint import RULES, LintConfig, lint_paths, lint_text
from torchkiln.lint.config import Suppressions
from torchkiln.lint.model import read_source

FIXTURES = Path(__file__).resolve().parents[1] / "lint_fixtures"
RULE_FILES = sorted(p for p in (FIXTURES / "rules").iterdir() if p.is_file())
SEED_FILES = sorted(p for p in (FIXTURES / "seeds").iterdir() if p.is_file())
_MARK = re.compile(r"#\s*expect:\s*(KL\d{3}(?:\s*,\s*KL\d{3})*)")


def expected(path: Path) -> set[tuple[str, int]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: set[tuple[str, int]] = set()
    for i, raw in enumerate(lines):
        m = _MARK.search(raw)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and _MARK.search(lines[j]):
            j += 1
        for rule in re.split(r"\s*,\s*", m.group(1)):
            out.add((rule, j + 1))
    return out


def found(path: Path) -> set[tuple[str, int]]:
    src = read_source(path)
    from torchkiln.lint import lint_source

    # a merged finding (the same waste at several RUNs of a stage) answers each of its lines' markers
    return {c for f in lint_source(src, LintConfig()) for c in f.covers}


@pytest.mark.parametrize("path", RULE_FILES + SEED_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_findings_match_markers(path: Path) -> None:
    want = expected(path)
    if ".pass." in path.name:
        assert not want, "pass fixtures carry no expect markers"
    else:
        assert want, f"{path.name} announces no finding"
    assert found(path) == want


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_has_a_failing_and_a_passing_fixture(rule: str) -> None:
    names = [p.name for p in RULE_FILES]
    fails = [n for n in names if n.startswith(rule) and ".fail." in n]
    passes = [n for n in names if n.startswith(rule) and ".pass." in n]
    assert fails and passes, f"{rule}: fail={fails} pass={passes}"
    # the failing fixture really exercises its own rule
    assert any(rule == r for f in fails for r, _ in expected(FIXTURES / "rules" / f))


def test_every_rule_is_documented() -> None:
    for r in RULES.values():
        assert re.fullmatch(r"KL\d{3}", r.id)
        assert r.severity in ("error", "warning", "info")
        assert r.summary and "\n" not in r.summary
        assert len(r.why) > 80 and r.source and len(r.fix) > 20
    doc = (Path(__file__).resolve().parents[2] / "docs" / "lint.md").read_text(encoding="utf-8")
    for rid in RULES:
        assert f"### {rid}" in doc, f"{rid} missing from docs/lint.md"


def test_seed_fixtures_cover_many_rules() -> None:
    rules = {r for p in SEED_FILES for r, _ in expected(p)}
    assert len(SEED_FILES) >= 4
    assert len(rules) >= 12, sorted(rules)


# --- behaviour the fixtures do not show on their own --------------------------------------


def test_inline_suppression_above_and_inside_an_instruction() -> None:
    text = (
        "FROM python:3.11-slim-bookworm\n"
        "# installs tools\n"
        "# kiln: ignore=KL002\n"
        "RUN pip install numpy==2.1.0\n"
        "RUN pip install scipy==1.14.1 \\\n"
        "    && pip install rich==13.9.4  # kiln: ignore=KL002,KL003\n"
        "RUN pip install pandas==2.2.3\n"
        "USER 1000\n"
    )
    assert [(f.rule, f.line) for f in lint_text(text)] == [("KL002", 7)]
    everything = text.replace("RUN pip install pandas", "# kiln: ignore=all\nRUN pip install pandas")
    assert lint_text(everything) == []


def test_suppression_scan_reads_ids_case_insensitively() -> None:
    sup = Suppressions.scan(["# kiln: ignore=kl001, KL005", "RUN x"])
    assert sup.matches("KL001", range(1, 3)) and sup.matches("KL005", range(1, 2))
    assert not sup.matches("KL002", range(1, 3))


def test_config_ignore_severity_and_per_file(tmp_path: Path) -> None:
    df = tmp_path / "dev.Dockerfile"
    df.write_text(
        "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\nADD https://example.com/model.bin /m.bin\n"
        'CMD ["vllm", "serve", "m"]\n'
    )
    base = lint_paths([df])
    assert {f.rule for f in base.findings} == {"KL001", "KL005", "KL015"}
    cfg = LintConfig(
        ignore=frozenset({"KL005"}),
        severity={"KL015": "error"},
        per_file_ignores=(("*dev.Dockerfile", frozenset({"KL001"})),),
    )
    got = lint_paths([df], cfg)
    assert [(f.rule, f.severity) for f in got.findings] == [("KL015", "error")]


def test_target_changes_the_final_stage() -> None:
    text = (
        "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS dev\n"
        'CMD ["uvicorn", "app:app"]\n'
        "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS runtime\n"
        "USER 1000\n"
    )
    assert lint_text(text) == []
    rules = {f.rule for f in lint_text(text, config=LintConfig(target="dev"))}
    assert rules == {"KL001", "KL005"}


def test_training_switch_in_config() -> None:
    text = 'FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nENV NVCC_FLAGS="-O3 --use_fast_math"\nUSER 1000\n'
    assert lint_text(text) == []
    assert [f.rule for f in lint_text(text, config=LintConfig(training=True))] == ["KL007"]


def test_findings_carry_why_source_fix_and_stage() -> None:
    text = "FROM python:3.11-slim-bookworm AS app\nRUN pip install scipy==1.14.1\nUSER 1000\n"
    (f,) = lint_text(text, path="x/Dockerfile")
    assert (f.rule, f.severity, f.path, f.line, f.stage) == ("KL002", "warning", "x/Dockerfile", 2, "app")
    assert "--mount=type=cache,target=/root/.cache/pip" in f.fix
    assert "pip docs" in f.source and "cache" in f.why


def test_secret_names_and_shapes() -> None:
    from torchkiln.lint.rules import secret_name, url_credentials

    for name in ("HF_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "NPM_AUTH_KEY"):
        assert secret_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "HF_TOKEN_PATH", "TOKEN_FILE", "PWD", "MAX_JOBS", "AWS_ACCESS_KEY_ID"):
        assert not secret_name(name), name
    assert url_credentials("https://user:pw@host/simple") == "user:pw"
    flags = "FROM python:3.11-slim-bookworm\nARG SCCACHE_S3_NO_CREDENTIALS=0\nENV USE_AUTH_TOKEN=false\nUSER 1000\n"
    assert lint_text(flags) == []  # switches named like secrets are not secrets
    assert url_credentials("https://${TOKEN}@host") is None
    assert url_credentials("git+ssh://git@github.com/org/repo") is None
    assert url_credentials("https://host/simple") is None


def test_ptx_advice_skips_arch_specific_targets() -> None:
    def fix(value: str) -> list[str]:
        text = (
            f'FROM nvidia/cuda:12.8.1-devel-ubuntu24.04\nENV TORCH_CUDA_ARCH_LIST="{value}"\n'
            "RUN FORCE_CUDA=1 MAX_JOBS=4 pip install --no-cache-dir --no-build-isolation torch-scatter==2.1.2\n"
            "USER 1000\n"
        )
        return [f.fix for f in lint_text(text) if f.rule == "KL012"]

    assert fix("8.0;9.0a") == ['TORCH_CUDA_ARCH_LIST="8.0;9.0a;9.0+PTX"']
    assert fix("8.0;9.0;9.0a") == ['TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX;9.0a"']
    assert fix("8.0;9.0a+PTX") == ['TORCH_CUDA_ARCH_LIST="8.0;9.0a+PTX;9.0+PTX"']  # compute_90a is not portable
    assert fix("8.0;9.0+PTX") == []


def test_arch_list_validation_follows_torch() -> None:
    from torchkiln.lint.rules import VALID_ARCH_STRINGS, expand_arch_list

    assert expand_arch_list("Ampere;Hopper") == ["8.0", "8.6+PTX", "9.0+PTX"]
    assert expand_arch_list("Ampere+Tegra") == ["8.7"]
    assert expand_arch_list("8.0 9.0") == ["8.0", "9.0"]
    assert "" in expand_arch_list("8.0;")
    assert {"9.0a", "12.0+PTX", "10.3a+PTX"} <= VALID_ARCH_STRINGS
    assert not {"sm_80", "80", "8.0+ptx", "9.0f"} & VALID_ARCH_STRINGS


def test_arch_list_table_matches_installed_torch() -> None:
    """Our copy of torch's accepted arch strings is the one torch actually uses (when installed).

    Reads torch/utils/cpp_extension.py as text: importing torch would take seconds."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    src_path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "cpp_extension.py"
    src = src_path.read_text(encoding="utf-8")
    func = src[src.index("def _get_cuda_arch_flags") :]
    func = func[: func.index("\ndef ", 10)]

    from torchkiln.lint.rules import NAMED_ARCHES, SUPPORTED_ARCHES

    for arch in SUPPORTED_ARCHES:
        assert f"'{arch}'" in func, arch
    for named, value in NAMED_ARCHES:
        assert f"('{named}', '{value}')" in func, named


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_kl014_claim_holds_in_a_real_shell(shell: str) -> None:
    """What KL014 says happens is what sh/bash (RUN's /bin/sh -c) really do with the fixture's line."""
    import shutil
    import subprocess

    if not shutil.which(shell):
        pytest.skip(f"{shell} not present")
    cut = 'export TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX && echo "$TORCH_CUDA_ARCH_LIST"'
    assert [f.rule for f in lint_text(f"FROM python:3.11-slim-bookworm\nRUN {cut}\nUSER 1000\n")] == ["KL014"]
    got = subprocess.run([shell, "-c", cut + '; echo "after=$TORCH_CUDA_ARCH_LIST"'], capture_output=True, text=True)
    assert "not found" in got.stderr and "after=8.0" in got.stdout  # 9.0+PTX ran as a command
    quoted = cut.replace("=8.0;9.0+PTX", '="8.0;9.0+PTX"')
    assert lint_text(f"FROM python:3.11-slim-bookworm\nRUN {quoted}\nUSER 1000\n") == []
    ok = subprocess.run([shell, "-c", quoted], capture_output=True, text=True, check=True)
    assert ok.stdout.strip() == "8.0;9.0+PTX"


def test_kl028_names_no_line_of_the_joined_run_and_says_what_is_open() -> None:
    """BuildKit joins a RUN's `\\` continuations into one line, so bash's "line 2" (its count for
    the end of the text) would point at nothing; the message says what is left open instead."""
    text = (
        "FROM ubuntu:24.04\n"
        "RUN \\\n"
        "    if [ \"$TZ\" = x ]; then sed -i s/a/b/ /etc/apt/sources.list fi \\\n"
        "    && apt-get update\n"
    )
    (f,) = [f for f in lint_text(text) if f.rule == "KL028"]
    assert f.line == 2
    assert "line 2" not in f.message
    assert "unexpected end of file" in f.message and "`fi`" in f.message


def test_kl009_info_names_the_pinned_pip() -> None:
    """A fork of apex built with --global-option by a pip the file pins: the info says which pip, not
    that the file does not show it (the fork's pyproject.toml is what stays unknown)."""
    text = (
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel\n"
        'ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" MAX_JOBS=4\n'
        "RUN python -m pip install --no-cache-dir --force-reinstall pip==21.3.1\n"
        "RUN git clone https://github.com/someone/apex && cd apex \\\n"
        '    && pip install --no-cache-dir --global-option="--cuda_ext" ./\n'
        "USER 1000:1000\n"
    )
    [f] = [f for f in lint_text(text) if f.rule == "KL009"]
    assert f.severity == "info" and "fork (someone/apex)" in f.message
    assert "Line 3 pins pip 21.3.1" in f.message and "does not show which pip" not in f.message
