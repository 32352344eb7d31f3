"""The one subprocess runner: echo, capture, streaming, typed errors with the output's tail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchkiln.errors import BuildError, EngineMissingError, KilnError, SourceError
from torchkiln.runner import Completed, Runner

PY = sys.executable


def test_capture_and_echo() -> None:
    echoed: list[str] = []
    r = Runner(echo=echoed.append).run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert r.returncode == 0
    assert r.stdout.strip() == "out"
    assert r.stderr.strip() == "err"
    assert len(echoed) == 1 and echoed[0].startswith(PY) and "print" in echoed[0]


def test_echo_shows_extra_environment() -> None:
    echoed: list[str] = []
    Runner(echo=echoed.append).run([PY, "-c", "pass"], env={"DOCKER_BUILDKIT": "1"})
    assert echoed[0].startswith("DOCKER_BUILDKIT=1 ")


def test_streaming_merges_and_delivers_lines_in_order() -> None:
    lines: list[str] = []
    code = "import sys\nfor i in range(3):\n    print(i, flush=True)\n    print('e', i, file=sys.stderr, flush=True)"
    r = Runner().run([PY, "-c", code], on_line=lines.append)
    assert lines == ["0", "e 0", "1", "e 1", "2", "e 2"]
    assert r.stdout.splitlines() == lines


def test_failure_raises_with_tail_and_command() -> None:
    code = "import sys; [print('line', i) for i in range(100)]; sys.exit(4)"
    with pytest.raises(BuildError) as info:
        Runner(tail_lines=5).run([PY, "-c", code], what="the thing", hint="do X")
    e = info.value
    assert e.message == "the thing failed (exit code 4)."
    assert e.hint == "do X"
    assert e.details is not None
    lines = e.details.splitlines()
    assert lines[0].startswith("$ ")
    assert lines[1:] == [f"line {i}" for i in range(95, 100)]


def test_custom_error_type_and_classifier() -> None:
    def factory(message: str, hint: str | None, details: str | None) -> KilnError:
        return SourceError(message, hint, details=details)

    with pytest.raises(SourceError):
        Runner().run([PY, "-c", "raise SystemExit(1)"], error=factory)

    def classify(result: Completed) -> KilnError | None:
        return EngineMissingError("specific") if "daemon" in result.output else None

    with pytest.raises(EngineMissingError, match="specific"):
        Runner().run([PY, "-c", "import sys; print('no daemon', file=sys.stderr); sys.exit(1)"], classify=classify)


def test_no_check_returns_the_result() -> None:
    r = Runner().run([PY, "-c", "raise SystemExit(3)"], check=False)
    assert r.returncode == 3


def test_missing_binary_is_engine_missing_with_hint(tmp_path: Path) -> None:
    with pytest.raises(EngineMissingError) as info:
        Runner().run(["kiln-no-such-tool-xyz", "--version"], install_hint="apt-get install xyz")
    assert "not installed" in info.value.message
    assert info.value.hint == "apt-get install xyz"
    not_exec = tmp_path / "tool"
    not_exec.write_text("#!/bin/sh\n")
    with pytest.raises(EngineMissingError):
        Runner().run([str(not_exec)])


def test_stdin_file_and_timeout(tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text("hello")
    r = Runner().run([PY, "-c", "import sys; print(sys.stdin.read().upper())"], stdin=data)
    assert r.stdout.strip() == "HELLO"
    with pytest.raises(BuildError, match="did not finish"):
        Runner().run([PY, "-c", "import time; time.sleep(5)"], timeout=0.5)
    with pytest.raises(BuildError, match="did not finish"):
        Runner().run([PY, "-c", "import time\nwhile True:\n    print('x', flush=True); time.sleep(0.1)"],
                     on_line=lambda _l: None, timeout=0.5)


def test_runner_env_reaches_the_child() -> None:
    r = Runner(env={"KILN_TEST_VALUE": "42"}).run([PY, "-c", "import os; print(os.environ['KILN_TEST_VALUE'])"])
    assert r.stdout.strip() == "42"
