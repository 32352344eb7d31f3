"""Lint configuration (a TOML file) and inline suppression comments.

Config file (``--config FILE``, else ``.kiln-lint.toml`` in the current folder when present)::

    ignore = ["KL005"]                 # rules that never report
    fail-on = "warning"                # default for --fail-on: warning | error
    training = true                    # KL007: treat every image as a training image (default: detect)
    target = "runtime"                 # lint as `docker build --target runtime`

    [severity]                         # change a rule's severity
    KL012 = "warning"

    [per-file-ignores]                 # glob (matched against the path as given) → rules
    "docker/dev/*.Dockerfile" = ["KL001", "KL005"]

Inline suppression: a comment ``# kiln: ignore=KL001,KL002`` (or ``ignore=all``) on the lines
directly above an instruction, or inside it (a shell comment in a ``RUN``), silences those
rules for that instruction. In a shell script the comment goes on the line itself or the line
above.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from torchkiln.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error")
FailOn = Literal["warning", "error"]
DEFAULT_CONFIG_NAME = ".kiln-lint.toml"

_RULE_ID = re.compile(r"^KL\d{3}$")
_SUPPRESS = re.compile(r"#\s*kiln:\s*ignore\s*=\s*([A-Za-z0-9_, ]+)")


def severity_rank(s: Severity) -> int:
    return SEVERITIES.index(s)


@dataclass(frozen=True)
class LintConfig:
    ignore: frozenset[str] = frozenset()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    fail_on: FailOn = "warning"
    training: bool | None = None
    target: str | None = None
    path: str | None = None  # where it was read from

    def ignored_for(self, path: str) -> frozenset[str]:
        out = set(self.ignore)
        norm = path.replace("\\", "/")
        for pattern, rules in self.per_file_ignores:
            if fnmatch.fnmatch(norm, pattern) or fnmatch.fnmatch(Path(norm).name, pattern):
                out |= rules
        return frozenset(out)


def parse_config(text: str, path: str, known_rules: Sequence[str]) -> LintConfig:
    """Parse config TOML; unknown keys and unknown rule ids are errors (typos must not pass)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e})", hint="Fix the lint config file.") from None
    allowed = {"ignore", "fail-on", "training", "target", "severity", "per-file-ignores"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(
            f"{path}: unknown key(s) {', '.join(map(repr, unknown))}",
            hint=f"Allowed keys: {', '.join(sorted(allowed))}.",
        )

    def rules_list(value: object, where: str) -> frozenset[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{path}: {where} must be a list of rule ids", hint='Write e.g. ["KL001"].')
        ids = [v.upper() for v in value]
        _check_ids(ids, path, where, known_rules)
        return frozenset(ids)

    ignore = rules_list(data.get("ignore", []), "ignore")
    fail_on = data.get("fail-on", "warning")
    if fail_on not in ("warning", "error"):
        raise InputError(f"{path}: fail-on must be 'warning' or 'error', not {fail_on!r}", hint=None)
    training = data.get("training")
    if training is not None and not isinstance(training, bool):
        raise InputError(f"{path}: training must be true or false", hint="Leave it out to detect.")
    target = data.get("target")
    if target is not None and not isinstance(target, str):
        raise InputError(f"{path}: target must be a stage name", hint=None)
    sev_raw = data.get("severity", {})
    if not isinstance(sev_raw, dict):
        raise InputError(f"{path}: [severity] must be a table of rule = severity", hint=None)
    severity: dict[str, Severity] = {}
    for k, v in sev_raw.items():
        _check_ids([k.upper()], path, "[severity]", known_rules)
        if v not in SEVERITIES:
            raise InputError(f"{path}: severity of {k} must be error, warning or info, not {v!r}", hint=None)
        severity[k.upper()] = cast(Severity, v)
    pfi_raw = data.get("per-file-ignores", {})
    if not isinstance(pfi_raw, dict):
        raise InputError(f"{path}: [per-file-ignores] must be a table of glob = [rules]", hint=None)
    pfi = tuple((str(k), rules_list(v, f"per-file-ignores {k!r}")) for k, v in pfi_raw.items())
    return LintConfig(
        ignore=ignore,
        severity=severity,
        per_file_ignores=pfi,
        fail_on=cast(FailOn, fail_on),
        training=training,
        target=target,
        path=path,
    )


def load_config(path: Path | None, known_rules: Sequence[str], cwd: Path | None = None) -> LintConfig:
    """Read ``path``; without one, ``.kiln-lint.toml`` in ``cwd`` if it exists; else defaults."""
    if path is None:
        candidate = (cwd or Path.cwd()) / DEFAULT_CONFIG_NAME
        if not candidate.is_file():
            return LintConfig()
        path = candidate
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: lint config file not found", hint="Check the --config path.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the lint config ({e})", hint="Check the --config path.") from None
    return parse_config(text, str(path), known_rules)


def _check_ids(ids: Sequence[str], path: str, where: str, known: Sequence[str]) -> None:
    for i in ids:
        if not _RULE_ID.match(i) or i not in known:
            raise InputError(
                f"{path}: {where}: unknown rule id {i!r}",
                hint=f"Known rules: {', '.join(known)} (see `kiln lint --list-rules`).",
            )


@dataclass(frozen=True)
class Suppressions:
    """Which rules are silenced on which lines of one file."""

    by_line: Mapping[int, frozenset[str]]  # line → rule ids (or "ALL")

    @classmethod
    def scan(cls, lines: Sequence[str]) -> Suppressions:
        out: dict[int, frozenset[str]] = {}
        for n, raw in enumerate(lines, start=1):
            m = _SUPPRESS.search(raw)
            if m:
                ids = frozenset(p.strip().upper() for p in m.group(1).split(",") if p.strip())
                out[n] = ids
        return cls(out)

    def matches(self, rule: str, lines: range) -> bool:
        for n in lines:
            ids = self.by_line.get(n)
            if ids and (rule in ids or "ALL" in ids):
                return True
        return False
