"""`kiln lint`: review Dockerfiles (and shell scripts) with the ML/CUDA rules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from torchkiln.cli import app
from torchkiln.cli._common import console, err_console, print_json
from torchkiln.errors import ExitCode, InputError
from torchkiln.lint import RULES, LintConfig, LintReport, lint_paths, load_config, ordered_rules, render
from torchkiln.lint.check import STDIN

Format = Literal["text", "json", "sarif"]
FailOn = Literal["warning", "error"]
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@app.command("lint")
def lint_cmd(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help=(
                "Dockerfiles, shell scripts, Apptainer definitions, or folders to search for them; "
                "'-' reads a Dockerfile from stdin."
            ),
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = "text",
    fail_on: Annotated[
        FailOn | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a finding has this severity or higher (default: warning, or the config's fail-on).",
        ),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="Lint config (TOML). Default: .kiln-lint.toml in the current folder."),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="Lint as `docker build --target STAGE` (the final stage).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the report to this file instead of stdout.")
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Text format: leave out why/fix lines.")] = False,
    list_rules: Annotated[bool, typer.Option("--list-rules", help="Print the rules and exit.")] = False,
) -> int:
    """Check Dockerfiles for the ML/CUDA mistakes generic linters miss; each finding says how to fix it.

    Exit codes: 0 no finding at or above --fail-on, 1 findings at or above it, 7 an input file is
    unreadable or malformed. Silence a rule on one instruction with `# kiln: ignore=KL001` on the
    line above it.
    """
    if json_:
        fmt = "json"
    if list_rules:
        _print_rules(fmt)
        return 0
    if not paths:
        raise InputError("no Dockerfile given", hint="Run `kiln lint Dockerfile` (or a folder, or '-' for stdin).")
    config = load_config(config_file, sorted(RULES))
    if target is not None:
        config = LintConfig(**{**config.__dict__, "target": target})
    stdin = sys.stdin.buffer.read() if STDIN in paths else None
    report = lint_paths(paths, config, stdin=stdin)
    threshold = fail_on or config.fail_on

    if output is not None:
        try:
            output.write_text(render(report, fmt), encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write {output} ({e.strerror})", hint="Check the -o path.") from None
        _summary(report, err=True)
    elif fmt == "text":
        _print_text(report, verbose=not quiet)
    else:
        sys.stdout.write(render(report, fmt))

    if report.errors:
        if fmt == "text" and output is None:
            first = report.errors[0]
            n_more = len(report.errors) - 1
            more = f" (and {n_more} more unreadable file(s), listed above)" if n_more else ""
            raise InputError(first.message + more, hint=first.hint)
        return int(ExitCode.INPUT)
    return int(ExitCode.CHECK_FAILED) if report.failing(threshold) else int(ExitCode.OK)


def _print_text(report: LintReport, verbose: bool) -> None:
    for f in report.findings:
        where = f"[bold]{escape(f.path)}:{f.line}[/bold]"
        console.print(f"{where}: [{_STYLE[f.severity]}]{f.rule} {f.severity}[/]: {escape(f.message)}")
        if verbose:
            for r in f.related:
                console.print(
                    f"    [dim]also[/dim] {escape(f.path)}:{r.line}: [{_STYLE[r.severity]}]{r.rule} {r.severity}[/]: "
                    f"{escape(r.message)}"
                )
            console.print(f"    [dim]why:[/dim] {escape(f.why)} [dim]\\[{escape(f.source)}][/dim]")
            console.print(f"    [green]fix:[/green] {escape(f.fix)}")
    for e in report.errors[1:]:
        err_console.print(f"[bold red]error:[/bold red] {escape(e.message)}")
    _summary(report, err=False)


def _summary(report: LintReport, err: bool) -> None:
    c = report.counts()
    n = len(report.files)
    text = (
        f"{n} file{'s' if n != 1 else ''} checked: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
    )
    if report.errors:
        text += f", {len(report.errors)} unreadable"
    (err_console if err else console).print(f"[dim]{text}[/dim]")


def _print_rules(fmt: Format) -> None:
    rules = ordered_rules()
    if fmt == "json" or fmt == "sarif":
        print_json(
            [
                {
                    "id": r.id,
                    "name": r.name,
                    "severity": r.severity,
                    "summary": r.summary,
                    "why": r.why,
                    "source": r.source,
                    "fix": r.fix,
                    "applies_to": sorted(r.applies_to),
                }
                for r in rules
            ]
        )
        return
    for r in rules:
        sev = f"[{_STYLE[r.severity]}]{r.severity}[/]"
        console.print(f"[bold]{r.id}[/bold] {sev} {escape(r.name)}: {escape(r.summary)}")
