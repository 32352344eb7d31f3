"""ruff (pyproject.toml's rule set) and ``mypy --strict`` over src/torchkiln: what .ci/run and
tests/unit/test_static_checks.py run. Exit 0 when clean, 1 with the findings listed.

``EXEMPT`` names files whose findings are left to their owners' branches for now (each with why);
an exempt file that becomes clean must leave the list, so it cannot hide new findings for long.

    .venv/bin/python scripts/static_checks.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "src/torchkiln"
#: file -> why its findings do not fail the check yet (the final whole-tree pass after merging removes these)
EXEMPT: dict[str, str] = {
}


def _tool(name: str) -> list[str]:
    here = Path(sys.executable).parent / name
    return [str(here)] if here.exists() else [sys.executable, "-m", name]


def ruff_findings() -> list[tuple[str, str]]:
    r = subprocess.run([*_tool("ruff"), "check", TARGET, "--output-format", "json"], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed: {r.stderr.strip()}")
    return [(str(Path(f["filename"]).resolve().relative_to(ROOT)),
             f"{f['location']['row']}: {f['code']} {f['message']}") for f in json.loads(r.stdout or "[]")]


def mypy_findings() -> list[tuple[str, str]]:
    r = subprocess.run([*_tool("mypy"), "--strict", TARGET], cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"mypy failed: {r.stderr.strip() or r.stdout.strip()}")
    out = []
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+?\.py):(\d+): error: (.*)$", line)
        if m:
            out.append((m.group(1), f"{m.group(2)}: {m.group(3)}"))
    return out


def check() -> list[str]:
    """Every finding outside ``EXEMPT``, and every exempt file that has become clean."""
    found = [("ruff", f, msg) for f, msg in ruff_findings()] + [("mypy", f, msg) for f, msg in mypy_findings()]
    problems = [f"{tool} {f}:{msg}" for tool, f, msg in found if f not in EXEMPT]
    dirty = {f for _, f, _ in found}
    problems += [f"{f} is clean now: remove it from EXEMPT in scripts/static_checks.py" for f in EXEMPT
                 if f not in dirty]
    return problems


def main() -> int:
    problems = check()
    for p in problems:
        print(p)
    print(f"static checks: {len(problems)} problem(s)" + (f"; exempt for now: {', '.join(EXEMPT)}" if EXEMPT else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
