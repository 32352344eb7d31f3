"""Lint reports as text, JSON and SARIF 2.1.0 (for GitHub code scanning and other SARIF viewers).

Pure functions from a :class:`~torchkiln.lint.check.LintReport` to a string or a dict.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import quote

from torchkiln import __version__
from torchkiln.lint.check import Finding, LintReport
from torchkiln.lint.config import Severity
from torchkiln.lint.rules import Rule, ordered_rules

Format = Literal["text", "json", "sarif"]
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL: dict[Severity, str] = {"error": "error", "warning": "warning", "info": "note"}


def to_text(report: LintReport, *, verbose: bool = True) -> str:
    """One block per finding: ``path:line: KLnnn severity message`` then why and fix."""
    lines: list[str] = []
    for f in report.findings:
        lines.append(f"{f.path}:{f.line}: {f.rule} {f.severity}: {f.message}")
        if verbose:
            for r in f.related:
                lines.append(f"    also {f.path}:{r.line}: {r.rule} {r.severity}: {r.message}")
            lines.append(f"    why: {f.why} [{f.source}]")
            lines.append(f"    fix: {f.fix}")
    for e in report.errors:
        lines.append(f"error: {e.message}" + (f" (fix: {e.hint})" if e.hint else ""))
    c = report.counts()
    n = len(report.files)
    lines.append(
        f"{n} file{'s' if n != 1 else ''} checked: {c['error']} error(s), {c['warning']} warning(s), "
        f"{c['info']} info" + (f", {len(report.errors)} unreadable" if report.errors else "")
    )
    return "\n".join(lines) + "\n"


def to_json(report: LintReport) -> dict[str, Any]:
    return {
        "tool": "kiln lint",
        "version": __version__,
        "files": list(report.files),
        "summary": report.counts(),
        "findings": [f.to_dict() for f in report.findings],
        "errors": [e.to_dict() for e in report.errors],
    }


def _rule_descriptor(r: Rule) -> dict[str, Any]:
    return {
        "id": r.id,
        "name": "".join(p.capitalize() for p in r.name.split("-")),
        "shortDescription": {"text": r.summary},
        "fullDescription": {"text": r.why},
        "help": {
            "text": f"{r.why}\nFix: {r.fix}\nSource: {r.source}",
            "markdown": f"{r.why}\n\n**Fix:** {r.fix}\n\n**Source:** {r.source}",
        },
        "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
        "properties": {
            "tags": ["dockerfile", "cuda", "ml"] + (["security"] if r.id in ("KL005", "KL006", "KL019") else []),
            "precision": "high",
            **({"security-severity": "8.0"} if r.id in ("KL006", "KL019") else {}),
        },
    }


def _artifact(path: str) -> dict[str, str]:
    """A SARIF artifactLocation: relative paths against %SRCROOT%, absolute ones as file: URIs."""
    if path == "<stdin>":
        return {"uri": "stdin"}
    p = PurePosixPath(path)
    if p.is_absolute():
        return {"uri": p.as_uri()}
    return {"uri": quote(path), "uriBaseId": "%SRCROOT%"}


def _fingerprint(f: Finding) -> str:
    return hashlib.sha256(f"{f.rule}\0{f.path}\0{f.message}".encode()).hexdigest()[:32]


def to_sarif(report: LintReport) -> dict[str, Any]:
    rules = ordered_rules()
    index = {r.id: i for i, r in enumerate(rules)}
    results = []
    for f in report.findings:
        results.append(
            {
                "ruleId": f.rule,
                "ruleIndex": index[f.rule],
                "level": _SARIF_LEVEL[f.severity],
                "message": {"text": f"{f.message}. Fix: {f.fix}"},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": _artifact(f.path),
                            "region": {"startLine": f.line, "endLine": max(f.end_line, f.line)},
                        }
                    }
                ],
                "partialFingerprints": {"kilnFindingHash/v1": _fingerprint(f)},
                **({"relatedLocations": [
                    {
                        "id": i,
                        "physicalLocation": {
                            "artifactLocation": _artifact(f.path),
                            "region": {"startLine": r.line, "endLine": max(r.end_line, r.line)},
                        },
                        "message": {"text": f"{r.rule} {r.severity}: {r.message}"},
                    }
                    for i, r in enumerate(f.related)
                ]} if f.related else {}),
            }
        )
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message + (f" Fix: {e.hint}" if e.hint else "")},
            "locations": [{"physicalLocation": {"artifactLocation": _artifact(e.path)}}],
        }
        for e in report.errors
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "kiln lint",
                        "semanticVersion": __version__,
                        "version": __version__,
                        "rules": [_rule_descriptor(r) for r in rules],
                    }
                },
                "invocations": [
                    {"executionSuccessful": not report.errors, "toolExecutionNotifications": notifications}
                ],
                "artifacts": [{"location": _artifact(p)} for p in report.files],
                "results": results,
            }
        ],
    }


def render(report: LintReport, fmt: Format) -> str:
    if fmt == "json":
        return json.dumps(to_json(report), indent=2) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif(report), indent=2) + "\n"
    return to_text(report)


def rules_table() -> list[dict[str, str]]:
    return [
        {"id": r.id, "name": r.name, "severity": r.severity, "summary": r.summary, "fix": r.fix, "source": r.source}
        for r in ordered_rules()
    ]
