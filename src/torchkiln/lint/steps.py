"""``[[steps]]`` reviewed with torchkiln's own rules when a spec is resolved (``load.load_plan``).

A step is the user's text, rendered as it is: the escape hatch must not quietly bring back what
torchkiln exists to prevent. The plan is rendered with its steps, and the rules of ``kiln lint`` run on
that Dockerfile; a finding on a line of a step is that step's (the rendered Dockerfile without steps
lints clean, ``tests/unit/test_lint_rendered.py``). Two checks only a plan can make are added: a step
that installs torch or a companion (the constraints make that build fail; without them it would
replace the plan's torch), and, in a CUDA plan, a step that compiles an extension without
``TORCH_CUDA_ARCH_LIST`` (it would build for the build machine's GPU, or for none).

Findings of severity ``error`` are certain (shell that does not parse, ``>=`` read as a redirection,
a kernel driver): the spec is refused. The others become warnings of the plan, shown by ``kiln
resolve``, ``explain`` and ``build``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torchkiln.errors import SpecError
from torchkiln.lint.check import Finding, lint_source
from torchkiln.lint.config import LintConfig
from torchkiln.lint.context import TORCH_FAMILY, build_context
from torchkiln.lint.model import parse_dockerfile
from torchkiln.lint.shell import Install
from torchkiln.plan import BuildPlan, StepPlan


@dataclass(frozen=True)
class StepFinding:
    step: StepPlan
    rule: str
    severity: str
    message: str
    fix: str

    def text(self) -> str:
        return f"[[steps]] {self.step.index} ({self.step.after}" + (
            f", {self.step.name}" if self.step.name else "") + f"): {self.rule} {self.message}. Fix: {self.fix}"


def _step_lines(text: str, plan: BuildPlan) -> dict[int, StepPlan]:
    """Line number (1-based) → the step whose RUN holds it, found by the comment each step opens with."""
    lines = text.splitlines()
    by_title = {f"# {s.title}": s for s in plan.steps}
    out: dict[int, StepPlan] = {}
    i = 0
    while i < len(lines):
        step = by_title.get(lines[i])
        i += 1
        if step is None:
            continue
        while i < len(lines):
            out[i + 1] = step
            if not lines[i].endswith("\\"):
                break
            i += 1
        i += 1
    return out


def review_steps(plan: BuildPlan) -> list[StepFinding]:
    """Every finding on the plan's steps, in line order (pure: renders and lints text)."""
    if not plan.steps:
        return []
    from torchkiln.render.dockerfile import render_dockerfile

    text = render_dockerfile(plan)
    owner = _step_lines(text, plan)
    df = parse_dockerfile(text, "Dockerfile")
    found: list[StepFinding] = []
    for f in lint_source(df):
        step = owner.get(f.line)
        if step is not None:
            found.append(_of(step, f))
    ctx = build_context(df, LintConfig())
    for s in ctx.steps:
        step = owner.get(s.ins.line)
        if step is None:
            continue
        for inst in s.installs:
            if inst.tool not in ("pip", "uv", "conda"):
                continue
            torch = sorted(inst.names & TORCH_FAMILY)
            if torch and inst.sub in ("install", "add", "sync"):
                found.append(StepFinding(
                    step, "torch-replaced", "warning",
                    f"installs {', '.join(torch)}, which torchkiln manages: under the build's constraints the "
                    "install fails, and without them it would replace the plan's torch",
                    "set [torch] version / packages in the spec instead, and remove it from the step"))
            if plan.torch.cuda and _builds_extension(inst) and not _arch_list_set(inst, step):
                found.append(StepFinding(
                    step, "extension-without-arch-list", "warning",
                    f"builds {', '.join(sorted(inst.names)) or 'an extension'} without TORCH_CUDA_ARCH_LIST: it "
                    "compiles for the GPU of the build machine, or for none",
                    f'add env = {{ TORCH_CUDA_ARCH_LIST = "{plan.arch_list}" }} to the step (the plan\'s targets), '
                    "or declare it as [[extensions]], which torchkiln builds for the targets"))
    # an "app" step is rendered twice (dev and runtime): one finding each
    unique = {(f.step.index, f.rule, f.message): f for f in found}
    return sorted(unique.values(), key=lambda f: f.step.index)


def _builds_extension(inst: Install) -> bool:
    return inst.has("--no-build-isolation") or inst.sub in ("build_ext", "bdist_wheel", "develop")


def _arch_list_set(inst: Install, step: StepPlan) -> bool:
    env = {**dict(step.env), **inst.env}
    return bool(env.get("TORCH_CUDA_ARCH_LIST"))


def _of(step: StepPlan, f: Finding) -> StepFinding:
    return StepFinding(step, f"{f.rule} {f.name}", f.severity, f.message, f.fix)


def check_steps(plan: BuildPlan, origin: str = "kiln.toml") -> BuildPlan:
    """``plan`` with its steps' warnings added; a SpecError for a finding that is certain (an error)."""
    found = review_steps(plan)
    errors = [f for f in found if f.severity == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(f"{origin}: {first.text().rsplit('. Fix: ', 1)[0]}{more}.", hint=first.fix)
    if not found:
        return plan
    return dataclasses.replace(plan, warnings=(*plan.warnings, *(f.text() for f in found)))
