"""Run the rules over files: discovery, configuration, suppressions, findings.

``lint_text`` and ``lint_source`` are pure; ``lint_paths`` reads files (and folders, searched for
Dockerfiles and shell scripts) and collects per-file input errors instead of stopping at the first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from torchkiln.errors import InputError
from torchkiln.lint.config import LintConfig, Severity, Suppressions, severity_rank
from torchkiln.lint.context import Context, build_context, skipped_by_default
from torchkiln.lint.model import (
    DEFINITION_NAME,
    DOCKERFILE_NAME,
    SCRIPT_SUFFIXES,
    Dockerfile,
    FileKind,
    Source,
    decode,
    parse_definition,
    parse_dockerfile,
    parse_script,
    read_source,
)
from torchkiln.lint.rules import PACKAGE_CACHES, RULES, ordered_rules

_SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache"}


@dataclass(frozen=True)
class Finding:
    rule: str
    name: str
    severity: Severity
    path: str
    line: int
    end_line: int
    message: str
    fix: str
    why: str
    source: str
    stage: str | None = None
    #: findings reported with this one: the same problem at other RUNs of this stage (a rule with a
    #: per-stage fix: one pip cache finding per stage, not one per RUN), or, on a command the build
    #: fails at, the findings on the steps it never reaches
    related: tuple[Related, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def covers(self) -> tuple[tuple[str, int], ...]:
        """Every (rule, line) the finding reports: its own, then its related ones'."""
        return ((self.rule, self.line), *((r.rule, r.line) for r in self.related))


@dataclass(frozen=True)
class Related:
    """A finding reported inside another: its rule, line, own severity and message."""

    rule: str
    line: int
    end_line: int
    severity: Severity
    message: str


@dataclass(frozen=True)
class FileError:
    path: str
    message: str
    hint: str | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LintReport:
    files: tuple[str, ...]
    findings: tuple[Finding, ...]
    errors: tuple[FileError, ...] = ()

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f.severity] += 1
        return out

    def failing(self, fail_on: Severity) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if severity_rank(f.severity) >= severity_rank(fail_on))


def lint_source(source: Source, config: LintConfig | None = None) -> list[Finding]:
    """Findings for one parsed file, with configuration and inline suppressions applied."""
    config = config or LintConfig()
    ctx = build_context(source, config)
    ignored = config.ignored_for(source.path)
    sup = Suppressions.scan(source.lines)
    ranges = _instruction_ranges(source) if isinstance(source, Dockerfile) else {}
    seen: set[tuple[str, int, str]] = set()
    stops: set[tuple[str, int, str]] = set()  # findings at a command the build fails at
    out: list[Finding] = []
    for r in ordered_rules():
        if r.id in ignored or source.kind not in r.applies_to:
            continue
        for hit in r.check(ctx):
            key = (r.id, hit.line, hit.message)
            if key in seen:
                continue
            seen.add(key)
            if sup.matches(r.id, _suppression_lines(source, ranges, hit.line)):
                continue
            if r.stops_build if hit.stops is None else hit.stops:
                stops.add(key)
            out.append(
                Finding(
                    rule=r.id,
                    name=r.name,
                    severity=config.severity.get(r.id, hit.severity or r.severity),
                    path=source.path,
                    line=hit.line,
                    end_line=hit.end_line or hit.line,
                    message=hit.message,
                    fix=hit.fix or r.fix,
                    why=r.why,
                    source=r.source,
                    stage=hit.stage,
                )
            )
    if ctx.df is not None:
        out = _default_build_skips(out, ctx, config)
        out = _after_build_stop(out, ctx.df, config, stops, ranges)
    out = _merge_per_stage(out)
    out.sort(key=lambda f: (f.line, f.rule))
    return out


def _merge_per_stage(findings: list[Finding]) -> list[Finding]:
    """Waste a stage leaves at several RUNs gives one finding for the stage, not one per RUN: a rule
    with a per-stage fix (pip caches, apt lists) at several RUNs, and the package-cache rules
    (`PACKAGE_CACHES`: pip/uv, conda, dnf/apk caches and apt lists) together, and any rule whose
    findings in a stage say the same thing (one cause, such as an ENV each later RUN reads). The finding is at the
    most severe line (then the biggest waste, then the first line), its message names the other
    lines, which it carries as `related` (json; SARIF relatedLocations; text shows each), and its fix
    covers all of them. Severities, suppressions and the notes of an unreached or skipped step are
    already applied to each part, so nothing is lost or raised."""
    groups: dict[tuple[str, ...], list[Finding]] = {}
    for f in findings:
        if f.stage is None:
            continue
        if f.rule in PACKAGE_CACHES:
            groups.setdefault(("package caches", f.stage), []).append(f)
        elif RULES[f.rule].per_stage_fix:
            groups.setdefault((f.rule, f.stage), []).append(f)
        else:  # the same message at several lines: one cause (an ENV every later pip reads), one finding
            groups.setdefault((f.rule, f.stage, f.message), []).append(f)
    biggest = list(PACKAGE_CACHES)
    merged: dict[int, Finding | None] = {}
    for parts in groups.values():
        if len(parts) < 2:
            continue
        parts.sort(key=lambda f: (-severity_rank(f.severity),
                                  biggest.index(f.rule) if f.rule in biggest else 0, f.line))
        lead, rest = parts[0], sorted(parts[1:], key=lambda f: f.line)
        by_rule: dict[str, list[Finding]] = {}
        for f in parts:
            by_rule.setdefault(f.rule, []).append(f)
        message = lead.message
        same = [f for f in rest if f.rule == lead.rule]
        if same:
            message += (f"; the same in {len(same)} more RUN{'s' if len(same) > 1 else ''} of this stage, "
                        f"line{'s' if len(same) > 1 else ''} {_lines(same)}")
        others = [r for r in by_rule if r != lead.rule]
        if others:
            message += "; this stage also leaves " + ", ".join(
                f"{PACKAGE_CACHES[r]} (line{'s' if len(by_rule[r]) > 1 else ''} {_lines(by_rule[r])})" for r in others)
        fix = _stage_fix(lead.rule, by_rule[lead.rule])
        for r in others:
            fix += f" For the {PACKAGE_CACHES[r]}: {_stage_fix(r, by_rule[r])}"
        merged[id(lead)] = replace(
            lead, message=message, fix=fix,
            related=tuple(Related(f.rule, f.line, f.end_line, f.severity, f.message) for f in rest),
        )
        for f in rest:
            merged[id(f)] = None
    if not merged:
        return findings
    return [m for f in findings if (m := merged.get(id(f), f)) is not None]


def _lines(parts: list[Finding]) -> str:
    return ", ".join(f"{f.line} ({f.severity})" for f in sorted(parts, key=lambda f: f.line))


def _stage_fix(rule_id: str, parts: list[Finding]) -> str:
    """The fix for a rule's parts of a merged finding: its own when it is one RUN, else the rule's
    fix for the whole stage."""
    if len(parts) == 1:
        return parts[0].fix
    return RULES[rule_id].per_stage_fix or parts[0].fix


def _after_build_stop(
    findings: list[Finding], df: Dockerfile, config: LintConfig, stops: set[tuple[str, int, str]],
    ranges: dict[int, tuple[int, int]],
) -> list[Finding]:
    """A finding on a step the build never reaches, because an earlier command fails for certain (an
    error of a rule that stops the build: a deleted base tag, a shell syntax error, conda's Terms of
    Service), is about a build that cannot happen as the file is written: it is reported inside the
    stop's finding, as one of its related findings (at info, or its `[severity]` setting), not as a
    finding of its own; the stop's message counts them. Unreached: the rest of the failing stage
    (its own RUN included) and every stage that builds on it, by FROM or COPY --from. None is lost:
    json, SARIF (relatedLocations) and the text report list each, and once the stop is fixed they are
    findings again at their severity."""
    stage_of: dict[int, int] = {}
    for ins in df.instructions():
        for n in range(ins.line, ins.end_line + 1):
            stage_of[n] = ins.stage
    moot: dict[int, Finding] = {}  # id(finding) -> the stop that makes it unreached
    for stop in sorted((f for f in findings if (f.rule, f.line, f.message) in stops and f.severity == "error"),
                       key=lambda f: f.line):
        if id(stop) in moot or stop.line not in stage_of or stage_of[stop.line] < 0:
            continue
        failed = {stage_of[stop.line]}
        for st in df.stages[stage_of[stop.line] + 1 :]:  # a stage can only build on earlier ones
            refs = [df.stage_ref(r, before=st.index) for r in st.copies_from()]
            if st.parent in failed or any(r is not None and r.index in failed for r in refs):
                failed.add(st.index)
        run = ranges.get(stop.line, (stop.line, stop.line))
        for f in findings:
            if f is stop or id(f) in moot or f.line not in stage_of:
                continue
            index = stage_of[f.line]
            if index == stage_of[stop.line] and f.line < run[0]:
                continue  # before the failing instruction: that much runs
            if index in failed:
                moot[id(f)] = stop
    if not moot:
        return findings
    unreached: dict[int, list[Related]] = {}
    for f in findings:
        if (cause := moot.get(id(f))) is not None:
            unreached.setdefault(id(cause), []).append(
                Related(f.rule, f.line, f.end_line, config.severity.get(f.rule, "info"), f.message)
            )
    out = []
    for f in findings:
        if id(f) in moot:
            continue
        if (parts := unreached.get(id(f))) is not None:
            parts.sort(key=lambda r: (r.line, r.rule))
            n = len(parts)
            note = (f"; {n} finding{'s' if n > 1 else ''} on the steps after it, which the build never reaches as "
                    f"the file is written, {'are' if n > 1 else 'is'} listed with it ("
                    + ", ".join(f"{r.rule} line {r.line}" for r in parts)
                    + "; they apply once this is fixed)")
            f = replace(f, message=f.message + note, related=f.related + tuple(parts))
        out.append(f)
    return out


#: rules about the text itself, which the shell reads whatever branch runs
_TEXT_RULES = frozenset({"KL028", "KL030"})


def _default_build_skips(findings: list[Finding], ctx: Context, config: LintConfig) -> list[Finding]:
    """A finding on a RUN line that a build with the Dockerfile's default arguments skips (an
    ``if [ "$USE_GPU" = "True" ]`` branch with no such default) is about a build the file only makes
    with ``--build-arg``: it is reported at info, saying so (a ``[severity]`` setting still wins)."""
    skipped = skipped_by_default(ctx)
    if not skipped:
        return findings
    out = []
    for f in findings:
        hit = skipped.get(f.line)
        if hit is None or f.rule in _TEXT_RULES:
            out.append(f)
            continue
        guard, test = hit
        note = (f" (a build with the file's default ARG and ENV values skips this command: `{test}` is "
                f"{'false' if guard.holds else 'true'} with them; it runs only with other values, given by "
                "--build-arg)")
        severity = config.severity.get(f.rule, "info")
        out.append(replace(f, message=f.message + note, severity=severity))
    return out


def lint_text(
    text: str, path: str = "Dockerfile", kind: FileKind = "dockerfile", config: LintConfig | None = None
) -> list[Finding]:
    source: Source
    if kind == "script":
        source = parse_script(text, path)
    elif kind == "apptainer":
        source = parse_definition(text, path)
    else:
        source = parse_dockerfile(text, path)
    return lint_source(source, config)


def discover(paths: Sequence[Path]) -> list[tuple[Path, FileKind | None]]:
    """Files to lint: each file as given; folders searched for Dockerfiles and *.sh scripts."""
    out: list[tuple[Path, FileKind | None]] = []
    for p in paths:
        if p.is_dir():
            found: list[tuple[Path, FileKind | None]] = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if DOCKERFILE_NAME.match(name):
                        found.append((Path(root) / name, "dockerfile"))
                    elif DEFINITION_NAME.match(name):
                        found.append((Path(root) / name, "apptainer"))
                    elif name.endswith(SCRIPT_SUFFIXES):
                        found.append((Path(root) / name, "script"))
            if not found:
                raise InputError(
                    f"{p}: no Dockerfile (Dockerfile, *.Dockerfile, Containerfile), *.def or *.sh file in this folder",
                    hint="Pass the Dockerfile itself, or a folder that holds one.",
                )
            out.extend(found)
        else:
            out.append((p, None))
    return out


STDIN = Path("-")


def lint_paths(paths: Sequence[Path], config: LintConfig | None = None, stdin: bytes | None = None) -> LintReport:
    """Lint files and folders (``-`` = the Dockerfile given as ``stdin``).

    Unreadable or malformed files become :class:`FileError` entries; the others are still linted.
    """
    config = config or LintConfig()
    files: list[str] = []
    findings: list[Finding] = []
    errors: list[FileError] = []
    targets: list[tuple[Path, FileKind | None]] = discover([p for p in paths if p != STDIN])
    if STDIN in paths:
        targets.append((STDIN, "dockerfile"))
    for path, kind in targets:
        display = "<stdin>" if path == STDIN else _display(path)
        try:
            if path == STDIN:
                text = decode(stdin or b"", display)
                source: Source = parse_dockerfile(text, display)
            else:
                source = read_source(path, kind, display)
            findings.extend(lint_source(source, config))
            files.append(display)
        except InputError as e:
            errors.append(FileError(display, e.message, e.hint))
    return LintReport(tuple(files), tuple(findings), tuple(errors))


def _display(path: Path) -> str:
    """The path as reports show it: relative to the current folder when inside it, '/' separated."""
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
        return rel.as_posix()
    except ValueError:
        return path.as_posix()


def _instruction_ranges(df: Dockerfile) -> dict[int, tuple[int, int]]:
    """Each line of the file that belongs to an instruction → that instruction's first and last line."""
    out: dict[int, tuple[int, int]] = {}
    for i in df.instructions():
        for n in range(i.line, i.end_line + 1):
            out[n] = (i.line, i.end_line)
    return out


def _suppression_lines(source: Source, ranges: dict[int, tuple[int, int]], line: int) -> range:
    """The lines whose ``# kiln: ignore=`` comments apply to a finding on ``line``: its
    instruction (or the line itself) and the comment block directly above."""
    start, end = ranges.get(line, (line, line))
    first = start
    while first - 1 >= 1 and source.lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return range(first, end + 1)


def iter_rules() -> Iterator[str]:
    yield from sorted(RULES)
