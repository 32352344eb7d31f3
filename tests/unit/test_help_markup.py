"""Every help text survives rich's markup: a literal ``[tool.kiln]`` in a help string is read by rich
as a style tag and silently dropped from ``--help`` ("a pyproject.toml with , or a project folder"),
so a bracketed word must be escaped (``\\[tool.kiln]``)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import typer

from torchkiln.cli import app, load_commands

#: what rich's markup parser takes for a tag: `[` then a letter, `#`, `/` or `@` (rich.markup.RE_TAGS)
_TAG = re.compile(r"(?<!\\)\[([a-z#/@][^\[]*?)\]")


def _texts(cmd: typer.core.TyperCommand | typer.core.TyperGroup, path: str) -> Iterator[tuple[str, str]]:
    yield path, cmd.help or ""
    for p in cmd.params:
        yield f"{path} {p.name}", getattr(p, "help", None) or ""
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _texts(sub, f"{path} {name}")


def test_no_help_text_holds_an_unescaped_rich_tag() -> None:
    load_commands([])  # every command, as help does
    root = typer.main.get_command(app)
    assert len(getattr(root, "commands", {})) >= 16
    eaten = [(where, m.group(0)) for where, text in _texts(root, "kiln") for m in _TAG.finditer(text)
             if m.group(1).split("=")[0].strip() not in ("bold", "dim", "italic", "link", "red", "green", "yellow")]
    assert eaten == []


def test_the_escaped_table_name_shows_in_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from torchkiln.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["render", "--help"]) == 0
    assert "a pyproject.toml with [tool.kiln]" in capsys.readouterr().out


def test_the_tag_pattern_finds_an_unescaped_table_name() -> None:
    assert _TAG.findall("a pyproject.toml with [tool.kiln], HOST:CONTAINER[:ro]") == ["tool.kiln"]
    assert _TAG.findall("with \\[tool.kiln]") == []
