"""Export pieces without an engine: layer flattening (whiteouts, links, escapes), OCI archives, SIF from an archive.

The archives here are real tars made in the test, in the format ``docker save`` writes; the
end-to-end path through a real engine is in tests/integration/test_sif.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from torchkiln.errors import InputError
from torchkiln.images.archive import open_image
from torchkiln.images.export import apptainer_build_command, export_archive_to_sif, sif_name_for
from torchkiln.images.flatten import Flattener, flatten
from torchkiln.images.oci import write_oci_archive
from torchkiln.images.sif import INSPECT_METADATA
from torchkiln.runner import Runner


def _layer(entries: list[tuple[str, str, str | bytes]]) -> bytes:
    """A layer tar: (kind, name, content or link target); kinds file, dir, sym, hard."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1_600_000_000
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif kind == "file":
                raw = data if isinstance(data, bytes) else data.encode()
                ti.size, ti.mode = len(raw), 0o644
                tf.addfile(ti, io.BytesIO(raw))
            elif kind == "exe":
                raw = data if isinstance(data, bytes) else data.encode()
                ti.size, ti.mode = len(raw), 0o755
                tf.addfile(ti, io.BytesIO(raw))
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, str(data)
                tf.addfile(ti)
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, str(data)
                tf.addfile(ti)
    return buf.getvalue()


BASE = _layer([
    ("dir", "usr", ""), ("dir", "usr/lib", ""), ("sym", "lib", "usr/lib"), ("dir", "etc", ""),
    ("file", "etc/os-release", "bookworm\n"), ("file", "usr/lib/keep.so", "k"), ("file", "usr/lib/gone.so", "g"),
    ("dir", "opt", ""), ("dir", "opt/app", ""), ("file", "opt/app/old.py", "old"), ("file", "opt/app/also.py", "a"),
    ("file", "data", "a file that becomes a directory"), ("hard", "usr/lib/keep-link.so", "usr/lib/keep.so"),
    ("dir", "bin", ""), ("exe", "bin/hello", "#!/bin/sh\necho hello from the image\n"),
])
TOP = _layer([
    ("file", "usr/lib/.wh.gone.so", ""),  # delete a lower file
    ("dir", "opt/app", ""), ("file", "opt/app/.wh..wh..opq", ""), ("file", "opt/app/new.py", "new"),  # opaque dir
    ("file", "lib/via-link.so", "v"),  # written through the lower layer's lib -> usr/lib symlink
    ("dir", "data", ""), ("file", "data/x", "x"),  # a directory replaces a file
    ("sym", "escape", "/"), ("file", "escape/etc/escaped", "stays inside"),  # absolute link re-rooted
    ("file", "../outside", "stays inside"),  # ".." stops at the root
])


def _archive(tmp_path: Path, layers: list[bytes], config: dict[str, object] | None = None,
             tag: str = "acme/x:1") -> Path:
    digests = ["sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers]
    cfg = {"architecture": "amd64", "created": "2024-01-02T03:04:05Z", "os": "linux",
           "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/hello"], "WorkingDir": "/opt/app"},
           "rootfs": {"type": "layers", "diff_ids": digests}}
    cfg.update(config or {})
    cfg_raw = json.dumps(cfg).encode()
    cfg_name = hashlib.sha256(cfg_raw).hexdigest() + ".json"
    names = [f"{d[7:]}/layer.tar" for d in digests]
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [tag], "Layers": names}]).encode()
    path = tmp_path / "image.docker.tar"
    with tarfile.open(path, "w") as tf:
        for name, raw in [(cfg_name, cfg_raw), *zip(names, layers, strict=True), ("manifest.json", manifest)]:
            ti = tarfile.TarInfo(name)
            ti.size = len(raw)
            tf.addfile(ti, io.BytesIO(raw))
    return path


def test_flatten_applies_whiteouts_links_and_keeps_everything_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with open_image(_archive(tmp_path, [BASE, TOP]), tag="acme/x:1") as arch:
        stats = flatten((arch.layer_stream(ref) for ref in arch.meta.layers), root)
    assert stats.layers == 2 and stats.whiteouts == 2
    assert not (root / "usr/lib/gone.so").exists() and (root / "usr/lib/keep.so").read_text() == "k"
    assert sorted(p.name for p in (root / "opt/app").iterdir()) == ["new.py"]
    assert (root / "usr/lib/via-link.so").read_text() == "v" and (root / "lib").is_symlink()
    assert (root / "data").is_dir() and (root / "data/x").read_text() == "x"
    assert (root / "etc/escaped").read_text() == "stays inside"
    assert (root / "outside").read_text() == "stays inside"
    assert not (tmp_path / "outside").exists() and not Path("/etc/escaped").exists()
    assert os.stat(root / "usr/lib/keep-link.so").st_ino == os.stat(root / "usr/lib/keep.so").st_ino
    assert os.stat(root / "bin/hello").st_mode & 0o777 == 0o755
    assert int(os.stat(root / "etc/os-release").st_mtime) == 1_600_000_000


def test_symlink_loops_and_dangling_hard_links_are_input_errors(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    f = Flattener(root)
    f.apply(io.BytesIO(_layer([("sym", "a", "b"), ("sym", "b", "a")])))
    with pytest.raises(InputError, match="symbolic links"):
        f.apply(io.BytesIO(_layer([("file", "a/x", "x")])))
    with pytest.raises(InputError, match="hard link"):
        f.apply(io.BytesIO(_layer([("hard", "h", "no/such/file")])))
    with pytest.raises(InputError, match="not a readable tar"):
        f.apply(io.BytesIO(b"garbage" * 100))


def test_oci_archive_is_a_valid_layout_with_checked_digests(tmp_path: Path) -> None:
    arch = open_image(_archive(tmp_path, [BASE, TOP]))
    out = tmp_path / "x.oci.tar"
    assert write_oci_archive(arch, out, "1") == 2
    with tarfile.open(out) as tf:
        names = tf.getnames()
        blobs = {n.rsplit("/", 1)[-1]: tf.extractfile(n).read() for n in names  # type: ignore[union-attr]
                 if n.startswith("blobs/sha256/") and tf.getmember(n).isfile()}
        index = json.loads(tf.extractfile("index.json").read())  # type: ignore[union-attr]
        layout = json.loads(tf.extractfile("oci-layout").read())  # type: ignore[union-attr]
    assert layout == {"imageLayoutVersion": "1.0.0"}
    for digest, raw in blobs.items():
        assert hashlib.sha256(raw).hexdigest() == digest
    (desc,) = index["manifests"]
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "1"
    manifest = json.loads(blobs[desc["digest"][7:]])
    assert manifest["config"]["digest"][7:] in blobs and manifest["config"]["size"] == len(arch.meta.config_raw)
    assert [x["mediaType"] for x in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar"] * 2
    assert [x["digest"] for x in manifest["layers"]] == arch.meta.config["rootfs"]["diff_ids"]
    again = tmp_path / "again.tar"
    write_oci_archive(arch, again, "1")
    assert again.read_bytes() == out.read_bytes()  # deterministic
    arch.close()


def test_oci_archive_refuses_a_layer_whose_digest_does_not_match(tmp_path: Path) -> None:
    path = _archive(tmp_path, [BASE], {"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}})
    with pytest.raises(InputError, match="digest"):
        with open_image(path) as arch:
            write_oci_archive(arch, tmp_path / "x.tar", "1")
    assert not (tmp_path / "x.tar").exists()


def test_not_a_docker_archive(tmp_path: Path) -> None:
    p = tmp_path / "x.tar"
    with tarfile.open(p, "w") as tf:
        tf.addfile(tarfile.TarInfo("hello"), io.BytesIO(b""))
    with pytest.raises(InputError, match="manifest.json"):
        open_image(p)


def test_apptainer_commands_and_names() -> None:
    assert sif_name_for("acme/trainer:2024.11") == "trainer_2024.11.sif"
    assert sif_name_for("trainer") == "trainer.sif"
    assert apptainer_build_command(Path("/x/my image.tar"), "oci-archive", "acme/t:1") == \
        "apptainer build t_1.sif 'oci-archive:/x/my image.tar'"
    assert apptainer_build_command(Path("/x/i.tar"), "docker-archive", "t") == \
        "apptainer build t.sif docker-archive:/x/i.tar"
    assert apptainer_build_command(Path("/x/i.sif"), "sif", "t") is None


@pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="mksquashfs not installed (squashfs-tools)")
def test_sif_from_an_archive_runs_its_runscript_in_the_workdir(tmp_path: Path) -> None:
    with open_image(_archive(tmp_path, [BASE, TOP])) as arch:
        sif, stats = export_archive_to_sif(arch, tmp_path / "x.sif", "acme/x:1", Runner(), processors=1)
    assert stats.layers == 2
    assert sif.deffile == "Bootstrap: docker-daemon\nFrom: acme/x:1\n"
    runscript = sif.json_object(INSPECT_METADATA)["data"]["attributes"]["runscript"]
    assert "cd '/opt/app'" in runscript and "set -- '/bin/hello'" in runscript
    assert not any(p.name.startswith(".kiln-") for p in tmp_path.iterdir())  # temporary folders are gone
