"""``kiln lint``: review a Dockerfile (or a shell script) with the rules that ML/CUDA images need.

Library entry points (no printing, typed errors only)::

    from torchkiln.lint import lint_text, lint_paths, LintConfig
    findings = lint_text(dockerfile_text)

See ``docs/lint.md`` for the rule reference.
"""

from __future__ import annotations

from torchkiln.lint import rules_more  # noqa: F401  (registers KL030-KL039 in RULES; rules.py stays free of it)
from torchkiln.lint.check import FileError, Finding, LintReport, discover, lint_paths, lint_source, lint_text
from torchkiln.lint.config import LintConfig, Severity, load_config, parse_config
from torchkiln.lint.model import Dockerfile, Script, parse_dockerfile, parse_script, read_source
from torchkiln.lint.report import render, to_json, to_sarif, to_text
from torchkiln.lint.rules import RULES, Rule, ordered_rules

__all__ = [
    "RULES",
    "Dockerfile",
    "FileError",
    "Finding",
    "LintConfig",
    "LintReport",
    "Rule",
    "Script",
    "Severity",
    "discover",
    "lint_paths",
    "lint_source",
    "lint_text",
    "load_config",
    "ordered_rules",
    "parse_config",
    "parse_dockerfile",
    "parse_script",
    "read_source",
    "render",
    "to_json",
    "to_sarif",
    "to_text",
]
