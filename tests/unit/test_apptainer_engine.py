"""The apptainer engine without apptainer: detection, the commands it would run, and .sif files as images.

Apptainer itself cannot be installed on this machine; building with it is covered where it exists
(tests marked ``engine`` skip without it). What is tested here runs for real: the missing-engine
error, command composition, reading real SIF files, and the build inputs placed beside the definition.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from torchkiln.contract import VERIFY_SCRIPT, VERIFY_SPEC
from torchkiln.engines.apptainer import APPTAINER, ApptainerEngine, probe_apptainer
from torchkiln.engines.engine import BuildRequest, Engine, EngineInfo, ImageStore, Mount, RunRequest, require_store
from torchkiln.errors import EngineMissingError, ExitCode, InputError
from torchkiln.images.sif import INSPECT_METADATA, DataType, SifObject, write_sif
from torchkiln.runner import Runner


def _engine() -> ApptainerEngine:
    return ApptainerEngine(EngineInfo(APPTAINER, "/usr/bin/apptainer", "apptainer 1.3.4", "", "apptainer build"),
                           Runner())


def _sif(tmp_path: Path) -> Path:
    part = tmp_path / "p"
    part.write_bytes(b"hsqs" + b"\0" * 100)
    meta = b'{"data":{"attributes":{"labels":{"io.torchkiln.torch":"2.13.0"}}},"type":"container"}'
    write_sif(tmp_path / "img.sif", [
        SifObject(DataType.DEFFILE, data=b"Bootstrap: docker\nFrom: python:3.11-slim-bookworm\n"),
        SifObject(DataType.GENERIC_JSON, INSPECT_METADATA, data=meta),
        SifObject(DataType.PARTITION, path=part),
    ], image_id=uuid.UUID(int=3), created=1_700_000_000)
    return tmp_path / "img.sif"


def test_missing_apptainer_is_a_clear_engine_missing_error(tmp_path: Path) -> None:
    with pytest.raises(EngineMissingError) as e:
        probe_apptainer(Runner(), env={"PATH": str(tmp_path)})
    assert e.value.exit_code == ExitCode.ENGINE_MISSING
    assert "apptainer is not installed" in e.value.message
    assert "kiln export IMAGE --format sif" in (e.value.hint or "")
    with pytest.raises(EngineMissingError, match="not found"):
        probe_apptainer(Runner(), env={"KILN_APPTAINER": str(tmp_path / "nope")})


@pytest.mark.skipif(shutil.which("apptainer") is None and shutil.which("singularity") is None,
                    reason="apptainer is not installed")
def test_probe_finds_the_installed_apptainer() -> None:
    eng = probe_apptainer(Runner())
    assert eng.name == "apptainer" and eng.info.client_version[0].isalpha()


def test_build_command_runs_in_the_definition_folder(tmp_path: Path) -> None:
    command = _engine().build_command(BuildRequest(tmp_path, tmp_path / "kiln.def", tmp_path / "x.sif", no_cache=True))
    fake = [] if os.geteuid() == 0 else ["--fakeroot"]
    assert list(command.argv) == ["/usr/bin/apptainer", "build", *fake, "--force", "--disable-cache",
                                  str(tmp_path / "x.sif"), str(tmp_path / "kiln.def")]
    assert command.env == {} and command.cwd == tmp_path and command.writes == tmp_path / "x.sif"
    with pytest.raises(InputError, match="no 'dev' target"):
        _engine().build_command(BuildRequest(tmp_path, tmp_path / "kiln.def", tmp_path / "x.sif", target="dev"))


def test_exec_and_verify_commands() -> None:
    eng = _engine()
    cmd = eng.run_command(RunRequest(
        "/x/img.sif", ("python", "-c", "print(1)"), gpus=True,
        mounts=(Mount(Path("/data/in put"), "/in"), Mount(Path("/out"), "/out", read_only=False)),
        env={"A": "b c"}, workdir="/work"))
    assert cmd == ["/usr/bin/apptainer", "exec", "--nv", "--bind", "/data/in put:/in:ro", "--bind", "/out:/out",
                   "--env", "A=b c", "--pwd", "/work", "/x/img.sif", "python", "-c", "print(1)"]
    assert eng.verify_command("/x/img.sif") == ["/usr/bin/apptainer", "exec", "--nv", "/x/img.sif", "python",
                                                VERIFY_SCRIPT, "--spec-json", VERIFY_SPEC, "--json"]
    with pytest.raises(InputError, match="calling user"):
        eng.run_command(RunRequest("/x/img.sif", ("id",), user="nobody"))
    assert eng.run_command(RunRequest("/x/img.sif"))[1] == "run"  # no command: the image's runscript


def test_sif_files_are_the_images(tmp_path: Path) -> None:
    eng = _engine()
    sif = _sif(tmp_path)
    assert eng.image_exists(str(sif)) and not eng.image_exists(str(tmp_path / "p"))
    details = eng.inspect_image(str(sif))
    assert details.id == str(uuid.UUID(int=3)) and details.labels == {"io.torchkiln.torch": "2.13.0"}
    assert details.size == 104 and details.created == "2023-11-14T22:13:20Z"
    assert eng.history(str(sif)) == ["Bootstrap: docker", "From: python:3.11-slim-bookworm"]
    assert eng.pull(str(sif)) and not eng.pull("python:3.11-slim-bookworm")
    with pytest.raises(InputError, match="not a SIF"):
        eng.inspect_image(str(tmp_path / "p"))
    assert eng.remove_image(str(sif)) and not sif.exists() and not eng.remove_image(str(sif))


def test_apptainer_is_an_engine_without_an_image_store() -> None:
    """A peer of the OCI engines, not a subclass that refuses half its methods: a command that needs a
    store asks for one by capability and gets an input error (exit 7) with what to do instead."""
    eng = _engine()
    assert isinstance(eng, Engine) and not isinstance(eng, ImageStore)
    assert not any(hasattr(eng, op) for op in ("save", "load", "tag", "push", "import_tar"))
    with pytest.raises(InputError, match="apptainer has no image store, so it cannot push an image by tag") as e:
        require_store(eng, "push an image by tag", "Push the file: apptainer push IMAGE.sif oras://REGISTRY/NAME:TAG")
    assert e.value.exit_code == ExitCode.INPUT and "oras://" in (e.value.hint or "")


def test_build_inputs_are_placed_privately_and_labels_as_apptainer_label_lines(tmp_path: Path) -> None:
    uv = tmp_path / "uv.toml"
    uv.write_text('index-url = "https://user:pw@mirror.invalid/simple"\n')
    placed = _engine()._place_inputs(tmp_path, {"kiln-uv": uv}, {"io.torchkiln.spec": "abc 123"})
    secret = tmp_path / ".kiln/secrets/kiln-uv"
    assert secret in placed and secret.read_text() == uv.read_text()
    assert secret.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / ".kiln/build.labels").read_text() == "io.torchkiln.spec abc 123\n"
    with pytest.raises(InputError, match="line break"):
        _engine()._place_inputs(tmp_path, {}, {"a": "x\ny"})
