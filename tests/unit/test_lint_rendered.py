"""torchkiln's own output passes its own linter: every example spec is rendered and its
Dockerfile (built as either of the targets a user builds: runtime, the default, and dev) and its
shell scripts have no finding."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchkiln.lint import LintConfig, lint_text
from torchkiln.lint.model import parse_dockerfile
from torchkiln.load import load_plan
from torchkiln.render.dockerfile import context_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPECS = sorted([*EXAMPLES.glob("*.toml"), *EXAMPLES.glob("*/kiln.toml")])


def test_there_are_examples_to_render() -> None:
    assert len(SPECS) >= 3


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_rendered_build_context_has_no_findings(spec: Path) -> None:
    _spec, plan, _ = load_plan(spec, facts=lambda image: None)
    files = context_files(plan)
    dockerfile = files["Dockerfile"]
    stages = [s.name for s in parse_dockerfile(dockerfile).stages]
    assert stages[-1] == "runtime"
    for target in [t for t in ("runtime", "dev") if t in stages]:
        findings = lint_text(dockerfile, f"{spec.stem}/Dockerfile", config=LintConfig(target=target))
        assert [(f.rule, f.line, f.message) for f in findings] == [], f"--target {target}"
    for name, text in files.items():
        if name.endswith(".sh"):
            assert lint_text(text, name, kind="script") == [], name


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_rendered_apptainer_definition_has_no_findings(spec: Path) -> None:
    from torchkiln.render.apptainer import render_apptainer

    _spec, plan, _ = load_plan(spec, facts=lambda image: None)
    text = render_apptainer(plan)
    findings = lint_text(text, f"{spec.stem}.def", kind="apptainer")
    assert [(f.rule, f.line, f.message) for f in findings] == []


def test_the_rendered_check_is_not_vacuous() -> None:
    """The same rendered Dockerfile with typical mistakes put back in is caught."""
    _spec, plan, _ = load_plan(EXAMPLES / "flash-attn.toml")
    dockerfile = context_files(plan)["Dockerfile"]
    no_user = "\n".join(ln for ln in dockerfile.splitlines() if not ln.startswith("USER ")) + "\n"
    serving = 'CMD ["python", "-m", "uvicorn", "app:app"]\n'
    assert {f.rule for f in lint_text(no_user + serving)} == {"KL005"}
    # KL001 (devel base) depends on the image's role: the rendered final stage installs from a lock
    # file whose contents lint cannot see (it may JIT-compile), so it is not asserted here.
    df = parse_dockerfile(dockerfile)
    assert df.final_stage() is not None


def test_an_unquoted_arch_list_in_rendered_output_would_be_caught() -> None:
    _spec, plan, _ = load_plan(EXAMPLES / "flash-attn.toml")
    dockerfile = context_files(plan)["Dockerfile"]
    # an arch list exported in a RUN, with its quotes taken away
    unquoted, n = re.subn(r"(?<=[ &])(\w*ARCHS?)=(['\"])([^'\"\n]*;[^'\"\n]*)\2(?= )", r"\1=\3", dockerfile)
    if not n:
        pytest.skip("the rendered flash-attn example no longer exports an arch list in a RUN")
    assert {f.rule for f in lint_text(unquoted)} == {"KL014"}
