"""Issue #24, item 1: an output folder that holds anything torchkiln did not write is refused, never emptied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from torchkiln.cli import main

ROOT = Path(__file__).parents[2]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "examples" / "cpu.toml", project / "kiln.toml")
    (project / "apps").mkdir()
    shutil.copy(ROOT / "examples" / "apps" / "cpu_app.py", project / "apps" / "cpu_app.py")
    (project / "notes.txt").write_text("mine\n")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return project


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_render_into_the_project_folder_is_refused_and_keeps_every_file(capsys, tmp_path: Path,
                                                                        monkeypatch) -> None:
    project = _project(tmp_path)
    before = _tree(project)
    monkeypatch.chdir(project)
    code, _, err = run(capsys, "render", ".", "-o", ".")
    assert code == 2, err
    assert "error:" in err and "fix:" in err and "Traceback" not in err
    assert "not written by torchkiln" in err
    assert _tree(project) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]  # no temporary folder left beside it


def test_build_dry_run_with_the_project_as_context_is_refused(capsys, tmp_path: Path) -> None:
    project = _project(tmp_path)
    before = _tree(project)
    code, _, err = run(capsys, "build", str(project), "--context", str(project), "--dry-run")
    assert code == 2, err
    assert _tree(project) == before


def test_a_rendered_folder_is_replaced_and_an_empty_one_is_used(capsys, tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "cpu.toml")
    out = tmp_path / "ctx"
    out.mkdir()  # empty: fine
    assert run(capsys, "render", spec, "-o", str(out))[0] == 0
    assert (out / ".kiln" / "written.json").is_file()
    (out / ".kiln" / "wheels" / "x-1-py3-none-any.whl").write_bytes(b"a wheel a build linked in")
    assert run(capsys, "render", spec, "-o", str(out))[0] == 0  # ours, and what builds add under .kiln: replaced
    assert (out / "Dockerfile").is_file()


def test_a_file_added_or_edited_in_a_rendered_folder_is_not_lost(capsys, tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "cpu.toml")
    out = tmp_path / "ctx"
    assert run(capsys, "render", spec, "-o", str(out))[0] == 0
    (out / "mine.py").write_text("print('mine')\n")
    code, _, err = run(capsys, "render", spec, "-o", str(out), "--json")
    assert code == 2 and "mine.py" in err
    (out / "mine.py").unlink()
    dockerfile = out / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# my edit\n")
    code, out_json, err = run(capsys, "render", spec, "-o", str(out), "--json")
    assert code == 2 and "Dockerfile" in err
    assert json.loads(out_json)["exit_code"] == 2
    assert dockerfile.read_text().endswith("# my edit\n")
