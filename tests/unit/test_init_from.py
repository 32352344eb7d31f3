"""`kiln init --from PATH`: a starter spec for an existing repository, which must resolve (#27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.cli import main
from torchkiln.load import load_plan


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


def test_requirements_only_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "proj", {
        "requirements.txt": "torch==2.4.0+cu121\ntorchvision\ntransformers>=4.40  # models\n-e ./mylib\n"
                            "--extra-index-url https://download.pytorch.org/whl/cu121\n--no-binary :all:\n",
        "mylib/setup.py": "", "train.py": "",
    })
    out = _init(capsys, folder)
    assert "--no-binary :all:" in out  # listed: not mapped
    _s, plan, _d = load_plan(folder)
    assert (plan.torch.version, plan.torch.cuda) == ("2.4.0", "12.1")
    assert plan.torch.companions[0].startswith("torchvision==")
    assert plan.pip_packages == ("transformers>=4.40",)
    assert plan.app.copy == ("mylib", "train.py") and plan.app.command == ("python", "train.py")
    assert [s.commands for s in plan.steps] == [("uv pip install --no-deps ./mylib",)]
    # a second run refuses to overwrite
    assert main(["init", "--from", str(folder)]) != 0


def test_pyproject_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "proj", {
        "pyproject.toml": '[project]\nname = "My.Proj"\nversion = "0.1"\nrequires-python = ">=3.12"\n'
                          'dependencies = ["torch>=2.6", "numpy", "einops==0.8.0"]\n'
                          '[project.optional-dependencies]\ndev = ["pytest"]\n'
                          '[[tool.uv.index]]\nname = "pytorch"\nurl = "https://download.pytorch.org/whl/cu126"\n',
        "uv.lock": "version = 1\n", "README.md": "", "src/my_proj/__init__.py": "",
    })
    out = _init(capsys, folder)
    assert "pyproject.toml, uv.lock" in out and "optional dependencies (dev)" in out
    _s, plan, _d = load_plan(folder)
    assert plan.image_name == "my.proj" and plan.python == "3.12" and plan.torch.cuda == "12.6"
    assert plan.pip_packages == ("numpy", "einops==0.8.0")
    assert plan.app.copy == ("pyproject.toml", "README.md", "src")
    assert plan.steps[0].after == "app" and plan.steps[0].commands == ("uv pip install --no-deps .",)


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
            "COPY requirements.txt .\n"
            "RUN pip install --no-cache-dir -r requirements.txt\n"
            "RUN huggingface-cli download bert-base-uncased --local-dir /models/bert\n"
            "COPY . .\n"
            "RUN python -m compileall -q .\n"
            "EXPOSE 8000\n"
            "USER appuser\n"
            "HEALTHCHECK --interval=10s CMD curl -f http://localhost:8000/ || exit 1\n"
            'ENTRYPOINT ["python", "serve.py"]\nCMD ["--port", "8000"]\n'),
        "requirements.txt": "torch==2.5.1\nfastapi\n",
        "serve.py": "", "utils/x.py": "", ".git/HEAD": "",
    })
    out = _init(capsys, folder)
    for listed in ("1 earlier stage", "ARG VERSION=1", "huggingface-cli download", "compileall"):
        assert listed in out
    _s, plan, _d = load_plan(folder)
    assert plan.python == "3.12" and plan.torch.version == "2.5.1"
    assert plan.apt_packages == ("libgl1", "curl") and plan.pip_packages == ("fastapi",)
    app = plan.app
    assert (app.workdir, app.user, app.expose, app.entrypoint, app.command) == (
        "/app", "appuser", (8000,), ("python", "serve.py"), ("--port", "8000"))
    assert dict(app.env) == {"HF_HOME": "/models"}
    assert app.healthcheck is not None and app.healthcheck.interval == "10s"
    assert app.copy == ("serve.py", "utils")  # never Dockerfile, .git or the requirements it read
    assert [(s.after, s.commands) for s in plan.steps] == [
        ("packages", ("huggingface-cli download bert-base-uncased --local-dir /models/bert",)),
        ("app", ("python -m compileall -q .",)),
    ]


def test_a_spec_the_resolver_must_fix_is_fixed_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # torch 2.0.1 has no wheel for Python 3.13: the resolver's first checked fix is applied and listed
    folder = _write(tmp_path / "proj", {"requirements.txt": "torch==2.0.1\n",
                                        "Dockerfile": "FROM python:3.13-slim\nCOPY requirements.txt .\n"
                                                      "RUN pip install -r requirements.txt\n"})
    out = _init(capsys, folder)
    assert "changed so that it resolves" in out
    load_plan(folder)


def test_nothing_to_read_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--from", str(tmp_path)]) == 7
    assert "no pyproject.toml, requirements.txt or Dockerfile" in capsys.readouterr().err
    assert not (tmp_path / "kiln.toml").exists()
