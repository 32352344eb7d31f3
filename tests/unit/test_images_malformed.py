"""Malformed images give exit 7 with an `error:` and a `fix:` line, never a traceback; export checks
its tools before any slow step (exit 11)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from torchkiln.cli import main
from torchkiln.errors import ExitCode, ToolMissingError
from torchkiln.images.export import export_image
from torchkiln.runner import Runner

D = "sha256:" + "a" * 64


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def _j(x: Any) -> bytes:
    return json.dumps(x).encode()


CASES: dict[str, dict[str, bytes]] = {
    "manifest-object": {"manifest.json": _j({"Config": "c.json"})},
    "manifest-str": {"manifest.json": _j("x")},
    "manifest-null": {"manifest.json": b"null"},
    "entry-int": {"manifest.json": _j([1])},
    "layers-str": {"manifest.json": _j([{"Config": "c.json", "Layers": "l.tar"}]), "c.json": b"{}"},
    "config-name-int": {"manifest.json": _j([{"Config": 3, "Layers": []}])},
    "config-list": {"manifest.json": _j([{"Config": "c.json", "Layers": []}]), "c.json": b"[]"},
    "rootfs-str": {"manifest.json": _j([{"Config": "c.json", "Layers": []}]), "c.json": _j({"rootfs": "x"})},
    "deep": {"manifest.json": b"[" * 100_000 + b"]" * 100_000},
    "escape-config": {"manifest.json": _j([{"Config": "../../etc/passwd", "Layers": []}])},
    "oci-index-list": {"index.json": _j([]), "oci-layout": b"{}"},
    "oci-dotdot": {"index.json": _j({"manifests": [{"digest": "sha256:../../etc/passwd"}]})},
    "oci-nested-no-digest": {
        "index.json": _j({"manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json"}]})
    },
    "oci-manifest-list": {"index.json": _j({"manifests": [{"digest": D}]}), f"blobs/sha256/{'a' * 64}": b"[1]"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_archive_is_exit_7_with_a_fix(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tar(tmp_path / "x.tar", CASES[case])
    code = main(["inspect", str(path)])
    _out, err = capsys.readouterr()
    assert code == ExitCode.INPUT, err
    assert "error:" in err and "fix:" in err and "Traceback" not in err


def test_directory_layout_never_opens_a_file_outside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = tmp_path / "layout"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "secret").write_text("{}")
    (layout / "blobs" / "sha256" / ("b" * 64)).symlink_to(tmp_path / "secret")
    (layout / "index.json").write_text(json.dumps({"manifests": [{"digest": "sha256:" + "b" * 64}]}))
    code = main(["inspect", str(layout)])
    _out, err = capsys.readouterr()
    assert code == ExitCode.INPUT and "outside the layout" in err


class _NoSave:
    def save(self, image: str, dest: Path) -> Path:
        raise AssertionError("the image must not be saved when a tool is missing")


def test_export_sif_checks_mksquashfs_before_saving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    with pytest.raises(ToolMissingError, match="mksquashfs") as e:
        export_image("acme/x:1", "sif", tmp_path / "x.sif", engine=_NoSave(), runner=Runner())
    assert e.value.exit_code == ExitCode.TOOL_MISSING == 11
    assert "squashfs-tools" in (e.value.hint or "")
    assert not (tmp_path / "x.sif").exists()


def _wheel(tmp_path: Path, patch: str) -> Path:
    import struct
    import zipfile

    elf = (Path(__file__).parent.parent / "fixtures" / "fatbin" / "multi.so").read_bytes()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.so", elf)
    raw = bytearray(buf.getvalue())
    local, central = raw.find(b"PK\x03\x04"), raw.find(b"PK\x01\x02")
    if patch == "method":  # an unknown compression method
        raw[local + 8 : local + 10] = raw[central + 10 : central + 12] = struct.pack("<H", 99)
    elif patch == "encrypted":
        raw[local + 6 : local + 8] = raw[central + 8 : central + 10] = struct.pack("<H", 1)
    else:  # corrupt deflate data
        n, m = struct.unpack("<HH", raw[local + 26 : local + 30])
        start = local + 30 + n + m
        for k in range(start + 10, start + 200):
            raw[k] ^= 0x5A
    path = tmp_path / "x-1.0-py3-none-any.whl"
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("patch", ["method", "encrypted", "deflate"])
def test_broken_wheels_are_exit_7(patch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", str(_wheel(tmp_path, patch))])
    _out, err = capsys.readouterr()
    assert code == ExitCode.INPUT and "error:" in err and "fix:" in err and "Traceback" not in err


def test_elf_whose_section_table_offset_is_beyond_a_c_long(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import struct

    elf = bytearray((Path(__file__).parent.parent / "fixtures" / "fatbin" / "multi.so").read_bytes()[:256])
    struct.pack_into("<Q", elf, 0x28, 15269454536599666688)  # e_shoff (found by the fuzz test)
    path = tmp_path / "x.so"
    path.write_bytes(elf)
    code = main(["inspect", str(path)])
    _out, err = capsys.readouterr()
    assert code == ExitCode.INPUT and "fix:" in err and "Traceback" not in err
