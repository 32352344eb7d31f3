"""The CLI: exit codes, JSON, no tracebacks for user errors, --debug shows one."""

import json
from pathlib import Path

import pytest

from torchkiln.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_resolve_json_for_every_example(capsys) -> None:
    code, out, _ = run(capsys, "resolve", *map(str, EXAMPLES), "--json")
    assert code == 0
    data = json.loads(out)
    assert len(data) == len(EXAMPLES)
    for item in data:
        for key in ("torch", "cuda", "python", "base_image", "arch_list", "targets", "min_driver"):
            assert key in item
        for t in item["targets"]:
            assert set(t) >= {"name", "capability", "covered"}


def test_resolve_error_exit_code_and_no_traceback(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text('[image]\nname = "a"\n[torch]\nversion = "2.5.1"\n[gpu]\ntargets = ["RTX 5090"]\n')
    code, out, err = run(capsys, "resolve", str(p))
    assert code == 4
    assert "no kernel image for RTX 5090" in err and "fix:" in err and "Traceback" not in err


def test_spec_error_json(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text('[image]\nname = "a"\n[gpu]\ntarget = ["A100"]\n')
    code, out, err = run(capsys, "resolve", str(p), "--json")
    assert code == 3
    data = json.loads(out)
    assert data["error"] == "SpecError" and "Did you mean 'targets'" in data["message"]


def test_error_text_keeps_table_names(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text('[image]\nname = "a"\n[torch]\nverison = "2.5.1"\n')
    code, _, err = run(capsys, "resolve", str(p))
    assert code == 3 and "unknown key 'verison' in [torch]" in err


def test_debug_shows_the_traceback(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "--debug", "resolve", str(tmp_path / "missing.toml"))
    assert code == 3 and "Traceback" in err


def test_usage_error_is_2(capsys) -> None:
    code, _, _ = run(capsys, "resolve")
    assert code == 2


def test_render_stdout_and_out(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "render", str(ROOT / "examples" / "cpu.toml"), "--stdout")
    assert code == 0 and out.startswith("# Rendered by torchkiln") and "AS runtime" in out
    code, out, _ = run(capsys, "render", str(ROOT / "examples" / "cpu.toml"), "-o", str(tmp_path / "ctx"), "--json")
    assert code == 0 and "Dockerfile" in json.loads(out)["files"]
    assert (tmp_path / "ctx" / "Dockerfile").read_text().startswith("# Rendered by torchkiln")


def test_explain_table_and_json(capsys) -> None:
    code, out, _ = run(capsys, "explain", str(ROOT / "examples" / "cu130-hopper.toml"), "--json")
    assert code == 0
    topics = [d["topic"] for d in json.loads(out)["decisions"]]
    assert topics[:3] == ["platform", "torch", "variant"] and "driver floor" in topics
    code, out, _ = run(capsys, "explain", str(ROOT / "examples" / "cu130-hopper.toml"))
    assert code == 0 and "TORCH_CUDA" in out
    code, out, _ = run(capsys, "explain", "--gpus", "--json")
    assert any(g["name"] == "H100" and g["capability"] == "9.0" for g in json.loads(out))


def test_init_writes_a_spec_that_resolves(capsys, tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    assert run(capsys, "init", str(p))[0] == 0
    assert run(capsys, "resolve", str(p))[0] == 0
    code, _, err = run(capsys, "init", str(p))
    assert code == 1 and "already exists" in err


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help(capsys, args: list[str]) -> None:
    code, out, _ = run(capsys, *args)
    assert code == 0 and out
