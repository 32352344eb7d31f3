"""A newcomer's first hour (issue 14): the CLI does what its help and the README say."""

import json
import re
from pathlib import Path

import pytest

from torchkiln.cli import COMMAND_MODULES, main

ROOT = Path(__file__).parents[2]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("arg", ["myproj", "newdir/", "a/b/c"])
def test_init_with_a_folder_name_writes_folder_kiln_toml(capsys, tmp_path: Path, monkeypatch, arg: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "init", arg)
    assert code == 0, err
    target = tmp_path / arg.rstrip("/") / "kiln.toml"
    assert target.is_file()
    assert run(capsys, "resolve", arg)[0] == 0


def test_init_into_an_existing_folder_and_a_toml_name(capsys, tmp_path: Path) -> None:
    assert run(capsys, "init", str(tmp_path))[0] == 0
    assert (tmp_path / "kiln.toml").is_file()
    assert run(capsys, "init", str(tmp_path / "other.toml"))[0] == 0
    assert (tmp_path / "other.toml").is_file()
    code, _, err = run(capsys, "init", str(tmp_path))
    assert code == 1 and "already exists" in err and "fix:" in err


def test_init_under_a_file_is_an_error_not_a_traceback(capsys, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    code, _, err = run(capsys, "init", str(tmp_path / "f" / "sub"))
    assert code == 2 and "not a folder" in err and "fix:" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [None, *COMMAND_MODULES])
def test_help_shows_flags_as_flags(capsys, command: str | None) -> None:
    code, out, _ = run(capsys, *([command] if command else []), "--help")
    assert code == 0 and "--help" in out
    assert "<bool>" not in out


def test_a_value_after_a_flag_is_explained(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "resolve", str(ROOT / "examples/cpu.toml"), "--json", "true")
    assert code == 3 and "take no value" in err and "fix:" in err


@pytest.mark.parametrize("args", [["resolve", "--bogus"], ["explain"], ["nosuchcommand"], ["render"]])
def test_usage_errors_say_error_and_fix(capsys, args: list[str]) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert re.search(r"^error: ", err, re.M) and re.search(r"^fix: ", err, re.M), err


def test_explain_piped_is_not_cut_and_keeps_brackets(capsys) -> None:
    code, out, _ = run(capsys, "explain", str(ROOT / "examples/flash-attn.toml"))
    assert code == 0
    assert "given in [base] image" in out  # rich markup would eat "[base]"
    assert "…" not in out  # no value cut short
    assert "nvidia/cuda:12.4.1-runtime-ubuntu22.04" in out


def test_resolve_table_shows_extensions_pip_packages_and_source_builds(capsys, tmp_path: Path) -> None:
    spec = (ROOT / "examples/flash-attn.toml").read_text().replace(
        "[app]", '[packages]\npip = ["transformers>=4.40"]\napt = ["libgl1"]\n\n[app]')
    p = tmp_path / "kiln.toml"
    p.write_text(spec)
    code, out, _ = run(capsys, "resolve", str(p))
    assert code == 0
    assert "transformers>=4.40" in out and "libgl1" in out
    line = next(x for x in out.splitlines() if "extension flash-attn" in x)
    assert "flash-attn==2.7.4.post1" in line and "built from source" in line
    assert re.search(r"~[\d.]+ (h|min) on \d+ cores", line)


def test_deeply_nested_toml_is_a_spec_error(capsys, tmp_path: Path) -> None:
    for value in ("[" * 1200 + "]" * 1200, "{a=" * 1200 + "1" + "}" * 1200, "[" * 40 + "]" * 40):
        p = tmp_path / "kiln.toml"
        p.write_text(f'[image]\nname = "a"\n[torch]\npackages = {value}\n')
        code, out, err = run(capsys, "resolve", str(p))
        assert code == 3, err
        assert "nested" in err and "fix:" in err and "Traceback" not in err


SECRET = "s3cr3tPLANTED"


def test_credentials_never_printed(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text(f'[image]\nname = "a"\n[torch]\nversion = "2.5.1"\ncuda = "cpu"\n[sources]\n'
                 f'index_url = "https://bob:{SECRET}@pypi.example.com/simple"\n'
                 f'extra_index_urls = ["https://x:{SECRET}@h/simple"]\n'
                 f'torch_index = "https://ghp_{SECRET}abcdefghijklmnopqrstuvwxyz@h/whl/{{variant}}"\n')
    for args in (["resolve", str(p)], ["resolve", str(p), "--json"], ["explain", str(p)],
                 ["explain", str(p), "--json"], ["render", str(p), "--stdout"],
                 ["render", str(p), "--format", "apptainer", "--stdout"]):
        code, out, err = run(capsys, *args)
        assert code == 0, err
        assert SECRET not in out + err, args
    code, out, _ = run(capsys, "resolve", str(p), "--json")
    assert json.loads(out)["sources"]["index_url"] == "https://bob:***@pypi.example.com/simple"
    out_dir = tmp_path / "ctx"
    assert run(capsys, "render", str(p), "-o", str(out_dir))[0] == 0
    for f in out_dir.rglob("*"):
        if f.is_file() and f.name != "uv":
            assert SECRET.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("where", [
    'pip = ["pkg @ https://bob:{s}@host/pkg-1.0-py3-none-any.whl"]',
    'pip = ["pkg @ git+https://ghp_{s}abcdefghijklmnopqrstuvwxyz0123@github.com/o/pkg"]',
])
def test_credentials_outside_sources_are_refused_and_masked(capsys, tmp_path: Path, where: str) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text(f'[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[packages]\n{where.format(s=SECRET)}\n')
    for extra in ([], ["--json"]):
        code, out, err = run(capsys, "resolve", str(p), *extra)
        assert code == 3 and "credential" in err and "[sources]" in err
        assert SECRET not in out + err


@pytest.mark.parametrize("url", ["https[://bob:{s}@host/x", "https:/bob:{s}@host/x", "htt ps://bob:{s}@host/x",
                                 # found by the long fuzz run: a bracket or quote typed into the URL
                                 "git+https:[//oauth2:{s}@host/x.git", "git+https://o[auth2:{s}@host/x.git",
                                 "git+https://oauth2:{s}[@host/x.git"])
def test_mistyped_urls_with_a_password_are_masked(capsys, tmp_path: Path, url: str) -> None:
    # found by the CLI fuzz test: a mangled scheme hid the password from the URL pattern, and the
    # validation error quoted the value back
    p = tmp_path / "kiln.toml"
    p.write_text(f'[image]\nname = "a"\n[torch]\ncuda = "cpu"\n[packages]\npip = ["{url.format(s=SECRET)}"]\n')
    for extra in ([], ["--json"]):
        code, out, err = run(capsys, "resolve", str(p), *extra)
        assert code == 3, err
        assert SECRET not in out + err


def test_a_password_is_masked_wherever_user_password_at_host_stands() -> None:
    from torchkiln.redact import redact

    for text in ('"oauth2:{s}@gitlab.example.com', "x://\"bob:{s}@host", "oauth2:PL\"{s}@host", "a 'u:{s}@h' b"):
        assert SECRET not in redact(text.format(s=SECRET)), text
    # an image digest has the shape and no secret
    for text in ("kiln-base:bookworm@sha256:" + "a" * 64, "user@example.com", "https://u:${TOKEN}@h/simple"):
        assert redact(text) == text


def test_error_messages_are_redacted(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text(f'[image]\nname = "https://bob:{SECRET}@host/x"\n')
    code, out, err = run(capsys, "resolve", str(p), "--json")
    assert code == 3 and SECRET not in out + err


def test_render_output_never_aliases_the_users_files(capsys, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('mine')\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text("x = 1\n")
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n[torch]\ncuda = "cpu"\n'
                                        '[app]\ncopy = ["train.py", "src"]\n')
    for fmt in ("dockerfile", "apptainer"):
        out = tmp_path / f"out-{fmt}"
        assert run(capsys, "render", str(tmp_path), "-o", str(out), "--format", fmt)[0] == 0
        with open(out / "train.py", "a") as f:
            f.write("print('edited in the rendered context')\n")
        (out / "src" / "mod.py").write_text("x = 2\n")
        assert (tmp_path / "train.py").read_text() == "print('mine')\n"
        assert (tmp_path / "src" / "mod.py").read_text() == "x = 1\n"
        for f in out.rglob("*"):
            if f.is_file():
                assert f.stat().st_nlink == 1, f  # no hard link to anything (the user's files, the venv's uv)


def test_wheels_are_linked_only_into_the_cache(tmp_path: Path, monkeypatch) -> None:
    from torchkiln.building.sources import link_wheels

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"PK")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    mine = tmp_path / "ctx" / ".kiln" / "wheels"
    assert link_wheels([wheels], mine) == ["a-1.0-py3-none-any.whl"]
    assert (mine / "a-1.0-py3-none-any.whl").stat().st_nlink == 1  # a user-named context: a copy
    cached = tmp_path / "cache" / "contexts" / "x" / ".kiln" / "wheels"
    link_wheels([wheels], cached)
    assert (cached / "a-1.0-py3-none-any.whl").stat().st_ino == (wheels / "a-1.0-py3-none-any.whl").stat().st_ino


def test_bootstrap_output_is_quiet_without_verbose(capsys) -> None:
    from torchkiln.cli.build import StepDisplay

    lines = ["I: Retrieving InRelease", "I: Checking Release signature", "I: Valid Release signature (key id X)"]
    for i in range(100):  # debootstrap's order: the two phases alternate, package by package
        lines += [f"I: Retrieving pkg{i} 1.0", f"I: Validating pkg{i} 1.0"]
    for phase in ("Extracting", "Unpacking", "Configuring"):
        lines += [f"I: {phase} pkg{i} 1.0" for i in range(100)]
    lines += ["W: Failure trying to run: chroot x", "I: Base system installed successfully."]
    with StepDisplay(live=False, verbose=False) as display:
        for line in lines:
            display.line(line)
    err = capsys.readouterr().err
    assert 5 <= len(err.splitlines()) <= 12, err
    assert "W: Failure trying to run" in err
    with StepDisplay(live=False, verbose=True) as display:
        for line in lines:
            display.line(line)
    assert len(capsys.readouterr().err.splitlines()) == len(lines)


def test_ci_runs_exactly_the_readme_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands == ["bash scripts/quickstart.sh", ".venv/bin/python -m pytest"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert all(c in ci for c in commands), commands
    quickstart = (ROOT / "scripts" / "quickstart.sh").read_text()
    # what the suite needs beyond the package itself (issue 14: pytest, torch, the SIF tools, podman)
    for need in ("'.[test]'", "torch==2.13.0", "podman", "squashfs-tools", "siftool", "docker-registry"):
        assert need in quickstart, need


@pytest.mark.parametrize("fmt", ["dockerfile", "apptainer"])
def test_render_into_an_unwritable_place_is_an_error(capsys, fmt: str) -> None:
    code, _, err = run(capsys, "render", str(ROOT / "examples/cpu.toml"), "-o", "/proc/kiln-test", "--format", fmt)
    assert code == 2 and err.startswith("error: cannot write the build context") and "fix:" in err


def test_index_credentials_reach_the_probe_as_basic_auth_and_no_message() -> None:
    import base64
    import http.server
    import threading

    from torchkiln.building.sources import check_reachable
    from torchkiln.errors import SourceError

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 - the http.server API
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_reachable([f"http://bob:{SECRET}@127.0.0.1:{server.server_port}/simple"], None)
    finally:
        server.shutdown()
    assert seen == ["Basic " + base64.b64encode(f"bob:{SECRET}".encode()).decode()]
    with pytest.raises(SourceError) as e:
        check_reachable([f"https://bob:{SECRET}@idx.invalid:notaport/simple"], None)
    assert SECRET not in e.value.message + (e.value.hint or "") and "bob:***@" in e.value.message
