"""`kiln inspect IMAGE` read in place from the engine's storage gives the export's report.

The CPU example image (built once per session by the ``cpu_build`` fixture) is inspected by name
twice with each engine: in place from the layer folders (``--read direct``: docker's overlay2,
podman's overlay) and exported with the engine's ``save`` (``--read export``). The JSON reports
must be the same except for what describes the reading itself (``read``, and the archive's
format and sizes, which an in-place read has none of). Podman gets the same image copied from
docker (``podman pull docker-daemon:``), so both engines are compared on identical layers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from torchkiln.cli import main

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["inspect", "--json", "-t", "H100,T4", *argv])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _analysis(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what only says how it was read."""
    r = dict(report)
    r.pop("read")
    image = dict(r["image"])
    image.pop("format")
    image.pop("archive_size")
    image["layers"] = [{k: v for k, v in layer.items() if k != "blob_size"} for layer in image["layers"]]
    r["image"] = image
    return r


def _compare(capsys: pytest.CaptureFixture[str], engine: str, ref: str) -> None:
    direct = _inspect(capsys, "--engine", engine, "--read", "direct", ref)
    export = _inspect(capsys, "--engine", engine, "--read", "export", ref)
    assert direct["read"] == {"path": "direct", "engine": engine, "storage": direct["read"]["storage"], "reason": None}
    assert direct["read"]["storage"] in ("overlay2", "overlay")
    assert export["read"]["path"] == "export"
    assert direct["image"]["format"] == "engine-storage" and direct["image"]["archive_size"] is None
    assert export["image"]["format"] == "docker-archive" and export["image"]["archive_size"] > 100_000_000
    assert direct["summary"]["files"] > 10_000  # torch and Debian: a real image, not an empty one
    assert _analysis(direct) == _analysis(export)


def test_docker_direct_report_is_the_export_report(cpu_build: Any, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("reading docker's storage in place needs root")
    _compare(capsys, "docker", cpu_build.ref)


def test_podman_direct_report_is_the_export_report(cpu_build: Any, capsys: pytest.CaptureFixture[str]) -> None:
    podman = shutil.which("podman")
    if podman is None or os.geteuid() != 0:
        pytest.skip("needs podman, as root")
    ref = f"localhost/kiln-test/inspect-direct:{os.getpid()}"
    copied = subprocess.run([podman, "pull", "-q", f"docker-daemon:{cpu_build.ref}"], capture_output=True, text=True)
    if copied.returncode != 0:
        pytest.skip(f"podman cannot copy the image from docker: {copied.stderr.strip()[-300:]}")
    image_id = copied.stdout.strip().splitlines()[-1]
    try:
        subprocess.run([podman, "tag", image_id, ref], check=True, capture_output=True)
        _compare(capsys, "podman", ref)
    finally:
        subprocess.run([podman, "rmi", "-f", ref], capture_output=True)
        subprocess.run([podman, "rmi", image_id], capture_output=True)


def test_auto_reads_in_place_and_says_so(cpu_build: Any, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("reading docker's storage in place needs root")
    capsys.readouterr()
    assert main(["inspect", "-t", "H100", cpu_build.ref]) == 0
    assert "read in place from docker's overlay2 storage" in capsys.readouterr().out


def test_where_it_cannot_read_in_place_it_exports_and_says_why(
    cpu_build: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root (as a user in the docker group would be): auto exports, --read direct refuses (exit 7)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    report = _inspect(capsys, "--engine", "docker", "--read", "auto", cpu_build.ref)
    assert report["read"]["path"] == "export"
    assert "needs root (this is uid 1000)" in report["read"]["reason"]
    capsys.readouterr()
    assert main(["inspect", "--engine", "docker", "--read", "direct", cpu_build.ref]) == 7
    assert "cannot be read in place from docker's storage" in capsys.readouterr().err
