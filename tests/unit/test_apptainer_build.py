"""`kiln build --engine apptainer` (and `kiln run` / `kiln verify` of its .sif) without apptainer.

Apptainer cannot be installed on this machine, so the apptainer here is a small shell script named
``apptainer`` on a private PATH: a real executable, started by kiln as a real subprocess, that
records what it received (its argv, its working folder, the definition and the package-source
files present while it runs) and writes a real SIF file where it was told to. The tests assert on
what it received and on what kiln left on disk, not on kiln's internals.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.cli import main
from torchkiln.contract import sif_name
from torchkiln.engines.apptainer import APPTAINER, ApptainerEngine
from torchkiln.engines.engine import EngineInfo
from torchkiln.errors import InputError
from torchkiln.images.sif import DataType, SifObject, read_sif, write_sif
from torchkiln.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
SIF_NAME = "example-cpu_latest.sif"  # sif_name() of examples/cpu.toml
PEM = "-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAKHBfpE=\n-----END CERTIFICATE-----\n"
REPORT = {"schema": "torchkiln.verify/1", "status": "pass", "exit_code": 0,
          "checks": [{"name": "torch_import", "status": "pass", "reason": "torch 2.13.0+cpu"}]}

FAKE = r"""#!/bin/sh
# a stand-in for apptainer: records what it was given, answers like apptainer 1.3.4
log=@LOG@
case "$1" in
--version) echo "apptainer version 1.3.4"; exit 0 ;;
build)
    printf '%s\n' "$@" > "$log/argv"
    pwd > "$log/cwd"
    cp kiln.def "$log/kiln.def"
    ls -A .kiln/secrets > "$log/secrets"
    for f in .kiln/secrets/kiln-*; do
        if [ -f "$f" ]; then cp "$f" "$log/"; stat -c '%a' "$f" > "$log/$(basename "$f").mode"; fi
    done
    prev=""; out=""
    for a in "$@"; do out=$prev; prev=$a; done
    echo "INFO:    Starting build..."
    echo "INFO:    Running post scriptlet"
    echo "+ /kiln/bin/uv pip install --python /opt/venv/bin/python -r /kiln/requirements-torch.txt"
    if [ "@MODE@" = fail ]; then
        echo "half a file" > "$out"
        echo "  x No solution found when resolving dependencies: torch==9.9"
        echo "FATAL:   While performing build: while running engine: exit status 1" >&2
        exit 255
    fi
    echo "INFO:    Creating SIF file..."
    cp @SIF@ "$out"
    echo "INFO:    Build complete: $out"
    exit 0 ;;
exec|run)
    printf '%s\n' "$@" > "$log/argv"
    case "$*" in *checks.py*) cat @REPORT@; exit 0 ;; esac
    exit 3 ;;
esac
echo "FATAL:   unknown command $1" >&2
exit 255
"""


def _sif(path: Path) -> Path:
    """A real (tiny) SIF file: a definition and one squashfs-looking partition."""
    part = path.with_suffix(".part")
    part.write_bytes(b"hsqs" + b"\0" * 252)
    write_sif(path, [SifObject(DataType.DEFFILE, data=b"Bootstrap: docker\nFrom: python:3.11-slim-bookworm\n"),
                     SifObject(DataType.PARTITION, path=part)], image_id=uuid.UUID(int=7), created=1_700_000_000)
    part.unlink()
    return path


def fake_apptainer(tmp: Path, mode: str = "ok") -> tuple[Path, Path]:
    """(the folder to put first on PATH, the folder where it records what it received)."""
    bindir, log = tmp / "fakebin", tmp / "received"
    bindir.mkdir()
    log.mkdir()
    sif = _sif(tmp / "made-by-fake.sif")
    (tmp / "report.json").write_text(json.dumps(REPORT))
    script = bindir / "apptainer"
    script.write_text(FAKE.replace("@LOG@", str(log)).replace("@MODE@", mode).replace("@SIF@", str(sif))
                      .replace("@REPORT@", str(tmp / "report.json")))
    script.chmod(0o755)
    return bindir, log


def apptainer_first_on_path(tmp: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "ok") -> tuple[Path, Path]:
    """``fake_apptainer``, put first on PATH for the test."""
    bindir, log = fake_apptainer(tmp, mode)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir, log


def _spec(tmp: Path) -> Path:
    """examples/cpu.toml and its app in a folder of their own (the .sif lands next to the spec)."""
    folder = tmp / "proj"
    (folder / "apps").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "cpu.toml", folder / "kiln.toml")
    shutil.copyfile(ROOT / "examples" / "apps" / "cpu_app.py", folder / "apps" / "cpu_app.py")
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No host package sources, engine choice or cache folder leaks in; returns the kiln cache folder."""
    for var in ("KILN_ENGINE", "KILN_APPTAINER", "KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS",
                "KILN_TORCH_INDEX", "KILN_CA_BUNDLE", "KILN_NETWORK", "KILN_INDEX_STRATEGY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TERM", "dumb")
    return tmp_path / "cache"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- no apptainer --------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["--engine", "KILN_ENGINE"])
def test_without_apptainer_build_exits_5_with_the_install_hint_and_writes_nothing(
    how: str, tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path)
    before = _files(spec)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    args = ["--engine", "apptainer"] if how == "--engine" else []
    if how == "KILN_ENGINE":
        monkeypatch.setenv("KILN_ENGINE", "apptainer")
    code, out, err = run(capsys, "build", str(spec), *args, "--context", str(tmp_path / "ctx"))
    assert code == 5, err
    assert "apptainer is not installed (apptainer: not found; singularity: not found)" in err
    assert "apptainer.org/docs/admin" in err and "kiln export IMAGE --format sif" in err  # INSTALL_HINT
    assert "Traceback" not in err
    assert not (tmp_path / "ctx").exists() and not env.exists() and _files(spec) == before

    code, out, _ = run(capsys, "build", str(spec), *args, "--json")
    data = json.loads(out)
    assert code == 5 and data["exit_code"] == 5 and data["error"] == "EngineMissingError"
    assert "apt-get install apptainer" in data["hint"]


def test_apptainer_is_never_picked_on_its_own(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With apptainer the only engine on PATH, a plain `kiln build` still asks for docker or podman."""
    bindir, log = fake_apptainer(tmp_path)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("KILN_DOCKER", raising=False)
    monkeypatch.delenv("KILN_PODMAN", raising=False)
    code, _, err = run(capsys, "build", str(_spec(tmp_path)))
    assert code == 5 and "no usable container engine" in err
    assert not (log / "argv").exists()


# -- building with the stand-in -----------------------------------------------------------------------


def test_build_runs_apptainer_build_on_the_definition_with_the_sources_placed_then_removed(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    spec, ctx = _spec(tmp_path), tmp_path / "ctx"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text(PEM)

    code, out, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--context", str(ctx),
                         "--find-links", str(wheels), "--ca-bundle", str(ca), "--json")
    assert code == 0, err
    dest = spec / SIF_NAME

    # what apptainer was asked to do: build the definition, in its folder, into a file beside the destination
    argv = (log / "argv").read_text().splitlines()
    fakeroot = ["--fakeroot"] if os.geteuid() != 0 else []
    assert argv[:-2] == ["build", *fakeroot, "--force"]
    partial, deffile = Path(argv[-2]), Path(argv[-1])
    assert deffile == ctx / "kiln.def" and (log / "cwd").read_text().strip() == str(ctx)
    assert partial.name == SIF_NAME and partial.parent.parent == spec and partial.parent.name.startswith(".")
    assert not partial.parent.exists()  # moved into place, the private folder removed

    # the definition it read is the rendered one (bootstrapped from the plan's base, pulled by apptainer)
    definition = (log / "kiln.def").read_text()
    assert definition == (ctx / "kiln.def").read_text()
    assert definition.startswith("Bootstrap: docker\nFrom: python:3.11-slim-bookworm\n")

    # the package sources were there, private, while it ran, and are gone afterwards
    assert (log / "secrets").read_text().split() == [".keep", "kiln-ca", "kiln-uv"]
    assert 'find-links = ["/kiln/wheels"]' in (log / "kiln-uv").read_text()
    assert (log / "kiln-ca").read_text() == PEM
    assert (log / "kiln-uv.mode").read_text().strip() == "600"
    assert sorted(p.name for p in (ctx / ".kiln" / "secrets").iterdir()) == [".keep"]
    assert (ctx / ".kiln" / "wheels" / "six-1.16.0-py2.py3-none-any.whl").exists()
    assert "MIIBkTCB" not in definition and "/kiln/wheels" not in definition

    # the image is the .sif next to the spec, and the summary names it
    assert read_sif(dest).header.id == uuid.UUID(int=7)
    summary = json.loads(out)
    assert summary["image"] == str(dest) and summary["image_id"] == str(uuid.UUID(int=7))
    assert summary["size_bytes"] == dest.stat().st_size and summary["target"] == "runtime"
    assert summary["engine"]["name"] == "apptainer" and summary["engine"]["client_version"] == "apptainer 1.3.4"
    assert [s["name"] for s in summary["stages"]] == ["bootstrap", "post", "sif"]
    assert summary["base_image"] == "python:3.11-slim-bookworm" and summary["context"] == str(ctx)
    assert summary["sources"]["secrets"] == ["kiln-ca", "kiln-uv"] and summary["pushed"] is False

    code, out, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--context", str(ctx))
    assert code == 0, err
    assert f"built {dest} (runtime) with apptainer 1.3.4" in out
    assert f"kiln run {spec} --engine apptainer -- python" in out and f"apptainer run --nv {dest}" in out
    assert _files(spec) == sorted(["apps", "apps/cpu_app.py", "kiln.toml", SIF_NAME])


@pytest.mark.parametrize("fakeroot", [True, False])
def test_fakeroot_reaches_apptainer_build_when_not_root(fakeroot: bool, tmp_path: Path, env: Path) -> None:
    bindir, log = fake_apptainer(tmp_path)
    info = EngineInfo(APPTAINER, str(bindir / "apptainer"), "apptainer 1.3.4", "", "apptainer build")
    engine = ApptainerEngine(info, Runner(), fakeroot=fakeroot)
    summary = build_image(_spec(tmp_path), engine, BuildOptions(context_dir=tmp_path / "ctx"), env={})
    argv = (log / "argv").read_text().splitlines()
    assert argv[:-2] == ["build", *(["--fakeroot"] if fakeroot else []), "--force"]
    assert Path(summary.image).name == SIF_NAME


def test_tag_names_the_sif_and_dry_run_prints_the_command_without_building(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path)
    code, out, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--tag", "out/img.sif", "--dry-run",
                         "--json", "--context", str(tmp_path / "ctx"))
    assert code == 0, err
    data = json.loads(out)
    assert data["image"] == str(tmp_path / "out" / "img.sif")
    # the command the build runs: it writes beside the destination, which it replaces only after success
    partial = tmp_path / "out" / ".img.sif.partial" / "img.sif"
    assert data["command"][-2:] == [str(partial), str(tmp_path / "ctx" / "kiln.def")]
    assert data["writes"] == str(partial) and data["cwd"] == str(tmp_path / "ctx")
    assert (tmp_path / "ctx" / "kiln.def").is_file() and not (log / "argv").exists()

    code, out, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--tag", "out/img.sif")
    assert code == 0, err
    assert (tmp_path / "out" / "img.sif").is_file() and not (spec / SIF_NAME).exists()

    code, _, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--tag", "acme/img:1")
    assert code == 7 and "does not end in .sif" in err


def test_a_context_folder_the_system_refuses_is_exit_10_with_a_fix_and_no_traceback(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    apptainer_first_on_path(tmp_path, monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run(capsys, "build", str(_spec(tmp_path)), "--engine", "apptainer", "--dry-run", "--json",
                         "--context", str(blocker / "ctx"))
    assert code == 10
    assert json.loads(out)["error"] == "FilesError"
    assert f"{blocker}: File exists" in err and "fix:" in err and "Traceback" not in err
    assert blocker.read_text() == ""


def test_a_failed_build_leaves_the_previous_sif_and_no_partial_file_or_secrets(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch, mode="fail")
    spec, ctx = _spec(tmp_path), tmp_path / "ctx"
    old = _sif(spec / SIF_NAME).read_bytes()
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    code, _, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--context", str(ctx), "--ca-bundle",
                       str(ca))
    assert code == 6, err
    assert "apptainer build failed at the post stage" in err and "No solution found" in err
    assert (spec / SIF_NAME).read_bytes() == old
    assert _files(spec) == sorted(["apps", "apps/cpu_app.py", "kiln.toml", SIF_NAME])  # no partial file, no temp folder
    assert (log / "kiln-ca").exists() and not (ctx / ".kiln" / "secrets" / "kiln-ca").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--target", "dev"], "no 'dev' target"),
        (["--push"], "no image store to push"),
        (["--bootstrap", "oci-archive", "--from", "missing.tar"], "missing.tar (given with --from for Bootstrap "
                                                                  "oci-archive) does not exist"),
        (["--bootstrap", "localimage"], "needs the path of the base image file"),
    ],
)
def test_what_apptainer_cannot_do_is_refused_before_anything_is_written(
    args: list[str], words: str, tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path)
    code, _, err = run(capsys, "build", str(spec), "--engine", "apptainer", "--context", str(tmp_path / "ctx"),
                       *args)
    assert code == 7, err
    assert words in " ".join(err.split())
    assert not (tmp_path / "ctx").exists() and not (log / "argv").exists() and not (spec / SIF_NAME).exists()


def test_offline_bootstrap_from_a_file_relative_to_where_kiln_runs(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.oci.tar").write_bytes(b"not really a tar")
    code, out, err = run(capsys, "build", str(_spec(tmp_path)), "--engine", "apptainer", "--bootstrap",
                         "oci-archive", "--from", "base.oci.tar", "--json")
    assert code == 0, err
    assert (log / "kiln.def").read_text().startswith(f"Bootstrap: oci-archive\nFrom: {tmp_path / 'base.oci.tar'}\n")
    assert json.loads(out)["base_image"] == f"oci-archive:{tmp_path / 'base.oci.tar'}"


def test_localimage_base_must_be_a_sif() -> None:
    from torchkiln.building.execute import ensure_sif_base
    from torchkiln.building.options import ApptainerOptions
    from torchkiln.load import load_plan

    _spec, plan, _ = load_plan(ROOT / "examples" / "cpu.toml")
    engine = ApptainerEngine(EngineInfo(APPTAINER, "apptainer", "apptainer 1.3.4", "", ""), Runner())
    with pytest.raises(InputError, match="is not a SIF file"):
        ensure_sif_base(engine, ApptainerOptions("localimage", str(ROOT / "examples" / "cpu.toml")), plan.python,
                        plan.python_source, plan.base_image)
    assert sif_name(plan) == SIF_NAME


# -- running and verifying the .sif ----------------------------------------------------------------------


def test_run_and_verify_use_the_sif_the_build_wrote(
    tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    spec = _spec(tmp_path)
    sif = spec / SIF_NAME

    code, _, err = run(capsys, "run", str(spec), "--engine", "apptainer", "--", "python", "-V")
    assert code == 7 and f"{sif} does not exist" in err and "--engine apptainer" in err
    _sif(sif)

    code, _, err = run(capsys, "run", str(spec), "--engine", "apptainer", "--gpus", "--", "python", "-V")
    assert code == 3, err  # the command's exit code
    assert (log / "argv").read_text().splitlines() == ["exec", "--nv", str(sif), "python", "-V"]
    code, _, err = run(capsys, "run", str(spec), "--engine", "apptainer")
    assert (log / "argv").read_text().splitlines() == ["run", str(sif)]  # no command: the runscript

    code, out, err = run(capsys, "verify", str(sif), "--json")
    assert code == 0, err
    argv = (log / "argv").read_text().splitlines()
    assert argv[:2] == ["exec", "--nv"] and argv[argv.index(str(sif)) + 1] == "python3"
    checks = argv[argv.index(str(sif)) + 2]
    bind = argv[argv.index("--bind") + 1]
    assert checks == "/kiln-verify/checks.py" and bind.endswith(":/kiln-verify:ro")
    assert json.loads(out)["status"] == "pass"

    code, out, err = run(capsys, "verify", "--spec", str(spec / "kiln.toml"), "--engine", "apptainer", "--json")
    assert code == 0, err
    assert str(sif) in (log / "argv").read_text().splitlines()


def test_build_help_names_apptainer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "build", "--help")
    text = " ".join(out.split())
    assert code == 0 and "apptainer build" in text and "--bootstrap" in text and "apptainer for a .sif" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["push", "acme/x:1"], "push the file: apptainer push image.sif oras://"),
        (["export", "acme/x:1", "--format", "oci-archive", "-o", "x.tar"], "a .sif is already a file"),
        (["base", "bootstrap"], "bootstrap with docker or podman"),
        (["inspect", "acme/x:1"], "give the path of the .sif file"),
    ],
)
def test_commands_that_need_an_image_store_refuse_apptainer_by_capability(
    args: list[str], words: str, tmp_path: Path, env: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """apptainer has no store: each such command says so with exit 7 and what to do instead, and runs nothing."""
    bindir, log = apptainer_first_on_path(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *args, "--engine", "apptainer")
    assert code == 7, err
    text = " ".join(err.split()).lower()
    assert "apptainer has no image store, so it cannot" in text and words in text
    assert "Traceback" not in err and not (log / "argv").exists() and not (tmp_path / "x.tar").exists()
