"""`kiln init --from PATH`: a starter spec for an existing repository, which must resolve (#27)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from torchkiln.cli import main
from torchkiln.load import load_plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def _init(capsys: pytest.CaptureFixture[str], folder: Path) -> str:
    assert main(["init", "--from", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"check it with: kiln resolve {folder / 'kiln.toml'}" in out
    return out


FIXTURES = Path(__file__).parent.parent / "fixtures" / "projects"


def _spec_tables(folder: Path) -> dict[str, object]:
    return tomllib.loads((folder / "kiln.toml").read_text())


def test_requirements_only_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a requirements project is a [project]: its torch pin, index and local package are read from the file
    folder = _write(tmp_path / "proj", {
        "requirements.txt": "torch==2.4.0+cu121\ntorchvision\ntransformers>=4.40  # models\n-e ./mylib\n"
                            "--extra-index-url https://download.pytorch.org/whl/cu121\n--no-binary :all:\n",
        "mylib/setup.py": "", "train.py": "",
    })
    out = _init(capsys, folder)
    assert "--no-binary is ignored" in out  # the project reader's note, listed
    tables = _spec_tables(folder)
    assert tables["project"] == {} and "torch" not in tables and "packages" not in tables and "steps" not in tables
    _s, plan, _d = load_plan(folder)
    assert (plan.torch.version, plan.torch.cuda) == ("2.4.0", "12.1")
    assert plan.project is not None and plan.project.source == "requirements"
    assert "transformers>=4.40" in plan.project.requirements and plan.pip_packages == ()
    assert plan.project.locals[0][0] == "mylib" and plan.app.command == ("python", "train.py")
    assert plan.steps == ()
    # a second run refuses to overwrite
    assert main(["init", "--from", str(folder)]) != 0


def test_pyproject_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "proj", {
        "pyproject.toml": '[project]\nname = "My.Proj"\nversion = "0.1"\nrequires-python = ">=3.12"\n'
                          'dependencies = ["torch>=2.6", "numpy", "einops==0.8.0"]\n'
                          '[project.optional-dependencies]\ndev = ["pytest"]\n'
                          '[project.scripts]\nmy-proj = "my_proj:main"\n'
                          '[[tool.uv.index]]\nname = "pytorch"\nurl = "https://download.pytorch.org/whl/cu126"\n'
                          '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
        "README.md": "", "src/my_proj/__init__.py": "",
    })
    out = _init(capsys, folder)
    assert "from pyproject.toml in" in out and "optional dependencies (dev)" in out
    tables = _spec_tables(folder)
    assert tables["project"] == {} and tables["torch"] == {"cuda": "12.6"}  # no [torch] version: the project's range
    assert "python" not in tables and "packages" not in tables and "steps" not in tables
    _s, plan, _d = load_plan(folder)
    assert plan.image_name == "my.proj" and plan.torch.cuda == "12.6"
    assert tuple(int(x) for x in plan.python.split(".")) >= (3, 12)  # the resolver's choice within requires-python
    assert plan.project is not None and plan.project.package
    assert plan.project.requirements == ("numpy", "einops==0.8.0") and plan.pip_packages == ()
    assert plan.app.command == ("my-proj",) and plan.app.copy == ()


def test_directory_with_a_dockerfile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "proj", {
        "Dockerfile": (
            "FROM python:3.12-slim AS build\nRUN echo builder\n"
            "FROM python:3.12-slim\n"
            "ENV HF_HOME=/models PYTHONUNBUFFERED=1\n"
            "ARG VERSION=1\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends libgl1 curl "
            "&& rm -rf /var/lib/apt/lists/*\n"
            "WORKDIR /app\n"
            "COPY requirements.txt requirements-serve.txt .\n"
            "RUN pip install --no-cache-dir -r requirements.txt -r requirements-serve.txt\n"
            "RUN pip install gunicorn torch==2.5.1\n"
            "RUN huggingface-cli download bert-base-uncased --local-dir /models/bert\n"
            "COPY . .\n"
            "RUN python -m compileall -q .\n"
            "EXPOSE 8000\n"
            "USER appuser\n"
            "HEALTHCHECK --interval=10s CMD curl -f http://localhost:8000/ || exit 1\n"
            'ENTRYPOINT ["python", "serve.py"]\nCMD ["--port", "8000"]\n'),
        "requirements.txt": "torch==2.5.1\nfastapi\n", "requirements-serve.txt": "uvicorn\n",
        "requirements-dev.txt": "pytest\n",
        "serve.py": "", "utils/x.py": "", ".git/HEAD": "",
    })
    out = _init(capsys, folder)
    for listed in ("1 earlier stage", "ARG VERSION=1", "huggingface-cli download", "compileall"):
        assert listed in out
    tables = _spec_tables(folder)
    assert tables["project"] == {"requirements": ["requirements.txt", "requirements-serve.txt"]}
    assert "torch" not in tables  # the project pins torch: the Dockerfile's torch==2.5.1 is not written twice
    _s, plan, _d = load_plan(folder)
    assert plan.python == "3.12" and plan.torch.version == "2.5.1"
    assert plan.apt_packages == ("libgl1", "curl") and plan.pip_packages == ("gunicorn",)
    assert plan.project is not None and plan.project.requirements == ("fastapi", "uvicorn")
    app = plan.app
    assert (app.workdir, app.user, app.expose, app.entrypoint, app.command) == (
        "/app", "appuser", (8000,), ("python", "serve.py"), ("--port", "8000"))
    assert dict(app.env) == {"HF_HOME": "/models"}
    assert app.healthcheck is not None and app.healthcheck.interval == "10s"
    assert app.copy == ()  # COPY . . is the project's files: [project] copies them
    assert [(s.after, s.commands) for s in plan.steps] == [
        ("packages", ("huggingface-cli download bert-base-uncased --local-dir /models/bert",)),
        ("app", ("python -m compileall -q .",)),
    ]


def test_a_dockerfile_that_installs_the_project_with_extras(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "proj", {
        "pyproject.toml": '[project]\nname = "svc"\nversion = "1"\ndependencies = ["six"]\n'
                          '[project.optional-dependencies]\nserve = ["iniconfig"]\nviz = ["tqdm"]\n'
                          '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
        "svc/__init__.py": "",
        "Dockerfile": "FROM python:3.11-slim\nCOPY . .\nRUN pip install -e '.[serve]' six\n",
    })
    _init(capsys, folder)
    tables = _spec_tables(folder)
    assert tables["project"] == {"extras": ["serve"]} and "packages" not in tables  # six: the project's own
    _s, plan, _d = load_plan(folder)
    assert plan.project is not None and plan.project.requirements == ("six", "iniconfig")


def test_a_dockerfile_alone_maps_onto_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no project files: nothing for [project] to read, so pip installs become [packages] pip as before
    folder = _write(tmp_path / "proj", {"Dockerfile": "FROM python:3.11-slim\nRUN pip install torch==2.5.1 fastapi\n"
                                                      'CMD ["python", "app.py"]\n', "app.py": ""})
    _init(capsys, folder)
    assert "project" not in _spec_tables(folder)
    _s, plan, _d = load_plan(folder)
    assert plan.torch.version == "2.5.1" and plan.pip_packages == ("fastapi",) and plan.project is None


def test_a_spec_the_resolver_must_fix_is_fixed_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # torch 2.0.1 has no wheel for Python 3.13: the resolver's first checked fix is applied and listed
    folder = _write(tmp_path / "proj", {"requirements.txt": "torch==2.0.1\n",
                                        "Dockerfile": "FROM python:3.13-slim\nCOPY requirements.txt .\n"
                                                      "RUN pip install -r requirements.txt\n"})
    out = _init(capsys, folder)
    assert "changed so that it resolves" in out
    load_plan(folder)


def _fixture(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    (folder / "kiln.toml").unlink(missing_ok=True)  # the fixture's own spec: init --from writes one
    return folder


@pytest.mark.parametrize(("name", "project", "command"), [
    ("requirements-train", {}, ["python", "train.py"]),
    ("extras-groups", {}, None),
    ("monorepo", {"path": "services/trainer"}, ["trainer"]),
    ("pep723-script", {"script": "train.py"}, None),
])
def test_fixture_projects(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                          project: dict[str, object], command: list[str] | None) -> None:
    folder = _fixture(tmp_path, name)
    _init(capsys, folder)
    tables = _spec_tables(folder)
    assert tables["project"] == project
    assert "packages" not in tables and "steps" not in tables
    assert (tables.get("app") or {}).get("command") == command  # type: ignore[attr-defined]
    _s, plan, _d = load_plan(folder)
    assert plan.project is not None and plan.pip_packages == ()
    if name == "requirements-train":  # torch pinned by the requirements: no [torch] written, the pin is the plan's
        assert "torch" not in tables and (plan.torch.version, plan.torch.cuda) == ("2.13.0", None)
        assert plan.project.constraints and "six" in plan.project.names
    if name == "extras-groups":
        assert plan.project.package and plan.project.names == ("six",)
    if name == "monorepo":
        assert plan.image_name == "trainer" and plan.project.locals[0][0] == "libs/common"
    if name == "pep723-script":
        assert plan.project.names == ("six",)


def test_a_project_with_a_tool_kiln_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _fixture(tmp_path, "uvlock-src")
    assert main(["init", "--from", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "already holds a kiln spec ([tool.kiln])" in err and "--force" in err
    assert not (folder / "kiln.toml").exists()
    assert main(["init", "--from", str(folder), "--force"]) == 0
    tables = _spec_tables(folder)
    assert tables["project"] == {} and "torch" not in tables and tables["app"] == {"command": ["tinyproj"]}
    _s, plan, _d = load_plan(folder)
    assert plan.project is not None and plan.project.source == "uv.lock" and plan.project.torch_from


def test_an_ngc_dockerfile_keeps_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # [project] does not take a vendor image's torch: the dependencies go into [packages] pip, as said
    folder = _write(tmp_path / "proj", {"requirements.txt": "einops\n",
                                        "Dockerfile": "FROM nvcr.io/nvidia/pytorch:24.05-py3\n"
                                                      "RUN pip install -r requirements.txt\n"})
    out = _init(capsys, folder)
    assert "[project] is not written" in out
    tables = _spec_tables(folder)
    assert "project" not in tables and tables["packages"] == {"pip": ["einops"]}


def test_nothing_to_read_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--from", str(tmp_path)]) == 7
    assert "no pyproject.toml, uv.lock, requirements*.txt, PEP 723 script or Dockerfile" in capsys.readouterr().err
    assert not (tmp_path / "kiln.toml").exists()
