"""The README's exit-code table is the code's: every ExitCode has its row, and no row is stale."""

from __future__ import annotations

import re
from pathlib import Path

from torchkiln import errors
from torchkiln.errors import ExitCode, KilnError

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_lists_every_exit_code_and_no_other() -> None:
    table = README.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    assert rows == {int(c) for c in ExitCode}


def test_every_error_type_has_a_code_of_its_own() -> None:
    kinds = [c for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, KilnError) and c is not KilnError]
    codes = [c.exit_code for c in kinds]
    assert len(set(codes)) == len(codes), {c.__name__: int(c.exit_code) for c in kinds}
