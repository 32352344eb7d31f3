"""The Dockerfile model: BuildKit syntax, the stage graph, snippets with real line numbers, and a
clear InputError (never a traceback) for malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, InputError
from torchkiln.lint.model import Mount, guess_kind, parse_dockerfile, read_source, substitute
from torchkiln.lint.shell import commands

MALFORMED = Path(__file__).resolve().parents[1] / "lint_fixtures" / "malformed"

BUILDKIT = """\
# syntax=docker/dockerfile:1.7
# check=skip=SecretsUsedInArgOrEnv
ARG CUDA=12.8.1
ARG BASE=nvidia/cuda:${CUDA}-devel-ubuntu24.04
FROM ${BASE} AS Build
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \\
    --mount=type=secret,id=kiln-uv,env=UV_INDEX_URL \\
    # a comment inside the continuation
    uv pip install --system torch==2.7.1 \\
    && echo done
RUN <<EOF
set -e
apt-get update
EOF
COPY <<-EOT /etc/app.conf
\tkey=value
EOT
RUN <<A cat > /a.txt && <<B cat > /b.txt
first
A
second
B
FROM build AS runtime
COPY --from=build /opt/venv /opt/venv
COPY --from=0 /etc/app.conf /etc/app.conf
USER 1000
"""


def test_buildkit_syntax_is_parsed() -> None:
    df = parse_dockerfile(BUILDKIT, "Dockerfile")
    assert df.directives == {"syntax": "docker/dockerfile:1.7", "check": "skip=SecretsUsedInArgOrEnv"}
    assert df.global_args == {"CUDA": "12.8.1", "BASE": "nvidia/cuda:12.8.1-devel-ubuntu24.04"}
    assert [s.name for s in df.stages] == ["build", "runtime"]
    build, runtime = df.stages
    # ARG before FROM, substituted (a default that names an earlier ARG is expanded, as BuildKit does)
    assert build.image == "${BASE}"
    assert build.resolved_image == "nvidia/cuda:12.8.1-devel-ubuntu24.04"
    assert runtime.parent == 0 and df.chain(runtime) == (build, runtime)
    assert runtime.copies_from() == ("build", "0")
    run = build.instructions[0]
    assert (run.keyword, run.line, run.end_line) == ("RUN", 6, 10)
    assert [m.type for m in run.mounts] == ["cache", "secret"]
    assert run.cache_mount_targets() == ("/root/.cache/uv",)


def test_heredoc_bodies_have_their_file_lines() -> None:
    df = parse_dockerfile(BUILDKIT)
    run_heredoc, copy_heredoc, two = df.stages[0].instructions[1:4]
    assert (run_heredoc.line, run_heredoc.end_line) == (11, 14)
    assert run_heredoc.heredocs[0].line == 12
    assert run_heredoc.heredocs[0].content == "set -e\napt-get update\n"
    assert copy_heredoc.heredocs[0].strip_tabs
    assert [(h.name, h.line) for h in two.heredocs] == [("A", 19), ("B", 21)]
    # RUN <<EOF runs its body in a shell; `cat > file <<A` bodies are data, not commands
    (body,) = df.heredoc_snippets(run_heredoc)
    assert [(c.line, c.argv) for c in commands(body)] == [(12, ("set", "-e")), (13, ("apt-get", "update"))]
    assert df.heredoc_snippets(two) == []


def test_continuation_snippet_maps_each_command_to_its_line() -> None:
    df = parse_dockerfile(BUILDKIT)
    sn = df.snippet(df.stages[0].instructions[0])
    assert sn is not None
    got = [(c.line, c.argv[:3]) for c in commands(sn)]
    assert got == [(9, ("uv", "pip", "install")), (10, ("echo", "done"))]


def test_escape_directive_backtick() -> None:
    df = parse_dockerfile("# escape=`\nFROM mcr.microsoft.com/windows/servercore:ltsc2022\nRUN echo a `\n    b\n")
    assert df.escape == "`"
    run = df.stages[0].instructions[0]
    assert (run.line, run.end_line) == (3, 4)


def test_exec_form_and_lowercase_keywords() -> None:
    df = parse_dockerfile('from python:3.11-slim-bookworm as App\ncmd ["python", "-m", "app"]\n')
    cmd = df.stages[0].instructions[0]
    assert df.stages[0].name == "app"
    assert cmd.keyword == "CMD" and cmd.exec_form and cmd.args == ("python", "-m", "app")


def test_target_selects_final_stage_and_unknown_target_is_clear() -> None:
    df = parse_dockerfile(BUILDKIT)
    assert df.final_stage().name == "runtime"
    assert df.final_stage("Build").name == "build"
    with pytest.raises(InputError, match="no stage named 'test'"):
        df.final_stage("test")


def test_mount_and_substitution_helpers() -> None:
    m = Mount.parse("type=cache,target=/root/.cache/pip,sharing=locked")
    assert (m.type, m.target, m.options["sharing"]) == ("cache", "/root/.cache/pip", "locked")
    assert Mount.parse("type=bind,source=x,dst=/y").target == "/y"
    assert substitute("img:${TAG:-1.0}", {}) == "img:1.0"
    assert substitute("$A/$B", {"A": "x", "B": "y"}) == "x/y"
    assert substitute("${UNSET}", {}) is None


def test_kind_guessing() -> None:
    assert guess_kind(Path("build.sh"), "echo") == "script"
    assert guess_kind(Path("tool"), "#!/usr/bin/env bash\necho") == "script"
    assert guess_kind(Path("Dockerfile.cuda"), "#!/bin/sh\nFROM x") == "dockerfile"
    assert guess_kind(Path("gpu.Dockerfile"), "FROM x") == "dockerfile"
    assert guess_kind(Path("Containerfile"), "FROM x") == "dockerfile"
    assert guess_kind(Path("Singularity"), "Bootstrap: docker") == "apptainer"
    assert guess_kind(Path("image.def"), "") == "apptainer"
    assert guess_kind(Path("recipe"), "# comment\nBootStrap: docker\n") == "apptainer"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("unterminated-heredoc.Dockerfile", r":3: heredoc <<EOF is never closed"),
        ("empty.Dockerfile", r"the file is empty"),
        ("comments-only.Dockerfile", r"no instructions"),
        ("unknown-instruction.Dockerfile", r":2: unknown instruction 'RUNN'"),
        ("missing-backslash.Dockerfile", r":3: unknown instruction '&&': line 2 ends without `\\`"),
        # dockerfile-plus's INCLUDE+ pastes in another file: what the build sees is not this text
        ("third-party-frontend.Dockerfile", r":3: 'INCLUDE\+' is an instruction of the frontend .*edrevo/dockerfile-plus"),
        ("run-before-from.Dockerfile", r":1: RUN before the first FROM"),
        ("latin1.Dockerfile", r":2: not UTF-8 text"),
        ("spaced-heredoc.Dockerfile", r":5: unknown instruction 'print\(\"hello\"\)': the line before it ends with `<< 'PYEOF'`"),
    ],
)
def test_malformed_files_give_one_clear_input_error(name: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        read_source(MALFORMED / name)
    assert exc.value.exit_code == ExitCode.INPUT
    assert exc.value.hint


def test_binary_file_is_refused(tmp_path: Path) -> None:
    blob = tmp_path / "Dockerfile"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    with pytest.raises(InputError, match="binary file"):
        read_source(blob)


def test_missing_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_source(tmp_path / "nope")
    with pytest.raises(InputError, match="is a directory"):
        read_source(tmp_path)


def test_buildkits_own_frontends_read_as_dockerfile() -> None:
    for syntax in ("docker/dockerfile:1.7", "docker.io/docker/dockerfile-upstream:master", "docker/dockerfile"):
        with pytest.raises(InputError, match=r"unknown instruction 'INCLUDE\+'"):
            parse_dockerfile(f"# syntax={syntax}\nFROM python:3.11-slim\nINCLUDE+ x\n")


def test_a_lost_backslash_is_reported_before_a_frontends_instruction() -> None:
    text = "# syntax = edrevo/dockerfile-plus\nFROM python:3.11-slim\nINCLUDE+ common\nRUN true\n    && false\n"
    with pytest.raises(InputError, match=r":5: unknown instruction '&&': line 4 ends without"):
        parse_dockerfile(text)
