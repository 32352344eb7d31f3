"""The report of ``kiln verify``: checks.py's JSON read into typed objects, and rendered as a table.

Pure: parsing raises ``InputError`` on anything that is not a report of the schema we know;
rendering writes to the rich console it is given. The CLI decides where output goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchkiln.errors import ExitCode, InputError
from torchkiln.verify.checks import SCHEMA

Status = Literal["pass", "fail", "skip"]
Verdict = Literal["pass", "fail", "no-gpu"]

_STATUSES = ("pass", "fail", "skip")
_VERDICTS = ("pass", "fail", "no-gpu")
_EXIT = {"pass": ExitCode.OK, "fail": ExitCode.CHECK_FAILED, "no-gpu": ExitCode.NO_GPU}


@dataclass(frozen=True)
class CheckRecord:
    name: str
    status: Status
    reason: str
    seconds: float
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifyReport:
    """One run of the checks: where it ran (``target``), the verdict, every check."""

    target: str
    status: Verdict
    checks: tuple[CheckRecord, ...]
    environment: Mapping[str, Any]
    raw: Mapping[str, Any]

    @property
    def exit_code(self) -> ExitCode:
        return _EXIT[self.status]

    @property
    def failed(self) -> tuple[CheckRecord, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def check(self, name: str) -> CheckRecord | None:
        return next((c for c in self.checks if c.name == name), None)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in _STATUSES}

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``kiln verify --json``: checks.py's report plus where it ran."""
        return {"target": self.target, **self.raw}


def report_from_dict(data: Any, target: str) -> VerifyReport:
    """Validate checks.py's report; ``InputError`` when it is not one."""
    def bad(why: str) -> InputError:
        return InputError(
            f"the checks in {target} returned something that is not a verify report ({why}).",
            hint="Check that the image runs Python 3.10+ with torch; rerun with --debug to see the command.",
        )

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("schema") != SCHEMA:
        raise bad(f"schema {data.get('schema')!r}, expected {SCHEMA!r}")
    status = data.get("status")
    if status not in _VERDICTS:
        raise bad(f"status {status!r}")
    raw_checks = data.get("checks")
    if not isinstance(raw_checks, list):
        raise bad("no list of checks")
    checks: list[CheckRecord] = []
    for c in raw_checks:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or c.get("status") not in _STATUSES:
            raise bad(f"a malformed check: {str(c)[:120]}")
        checks.append(CheckRecord(
            name=c["name"],
            status=cast(Status, c["status"]),
            reason=str(c.get("reason", "")),
            seconds=float(c.get("seconds", 0.0)),
            details=dict(c.get("details") or {}),
        ))
    env = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    return VerifyReport(target, cast(Verdict, status), tuple(checks), env, data)  # type: ignore[arg-type]


def parse_report(stdout: str, target: str) -> VerifyReport:
    """Read checks.py's ``--json`` output (stdout; anything printed before the JSON is skipped)."""
    text = stdout.strip()
    if not text.startswith("{"):
        at = text.find("\n{")
        if at < 0:
            raise report_error(target, "it printed no JSON report")
        text = text[at + 1:]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise report_error(target, f"its output is not JSON ({e.msg} at line {e.lineno})") from None
    return report_from_dict(data, target)


def report_error(target: str, why: str) -> InputError:
    return InputError(
        f"the checks in {target} did not produce a report: {why}.",
        hint="Check that the image has Python 3.10+ with torch on PATH (or pass --python); "
             "rerun with --debug to see the command.",
    )


# -- rendering ---------------------------------------------------------------------------------------

_MARK = {"pass": "[green]✓ pass[/green]", "fail": "[bold red]✗ fail[/bold red]", "skip": "[yellow]– skip[/yellow]"}


def _extra_lines(c: CheckRecord, limit: int = 6) -> list[str]:
    """What a failed check's details add to its reason (binaries, tracebacks)."""
    lines: list[str] = []
    d = c.details
    for n in list(d.get("not_runnable") or [])[:limit]:
        if isinstance(n, dict):
            lines.append(f"{n.get('path', n.get('binary'))}: has {' '.join(n.get('has') or [])} — "
                         f"no code for device {n.get('device')} ({n.get('capability')})")
    tb = d.get("traceback")
    if isinstance(tb, list) and tb:
        lines.extend(str(x) for x in tb[-3:])
    hint = d.get("hint")
    if isinstance(hint, str):
        lines.append(hint)
    return lines


def render_report(report: VerifyReport, console: Console) -> None:
    env = report.environment
    head = f"[bold]kiln verify[/bold] {escape(report.target)}"
    if env.get("torch"):
        head += f" · torch {escape(str(env['torch']))} (CUDA {escape(str(env.get('torch_cuda')))})"
    if env.get("python"):
        head += f" · Python {escape(str(env['python']))}"
    console.print(head)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("result")
    quiet = report.status == "no-gpu"  # every GPU check was skipped for the same reason: one line, below
    for c in report.checks:
        if quiet and c.status == "skip":
            continue
        result = escape(c.reason)
        if c.status == "fail":
            extra = _extra_lines(c)
            if extra:
                result += "\n" + "\n".join(f"[dim]{escape(x)}[/dim]" for x in extra)
        table.add_row(_MARK[c.status], c.name, f"{c.seconds:.1f}s", result)
    console.print(table)
    n = report.counts()
    tally = f"{n['pass']} passed, {n['fail']} failed, {n['skip']} skipped"
    if report.status == "pass":
        console.print(f"[bold green]OK[/bold green]: {tally}")
    elif report.status == "no-gpu":
        console.print(f"[bold red]no CUDA device[/bold red] where the checks ran ({escape(report.target)}): "
                      f"the {n['skip']} GPU checks were skipped.")
    else:
        names = ", ".join(c.name for c in report.failed)
        console.print(f"[bold red]FAILED[/bold red]: {names} ({tally})")
