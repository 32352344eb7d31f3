"""Issue #24, item 2: nothing a malformed image holds lands outside the folder it is flattened into.

The images are made here: a lower layer with ``a/sub/`` (mode 0777, owner 4242, mtime 0), a later layer
(or the same one) making ``a`` a symlink to a folder outside the root. Before the fix the directory
metadata was applied at the end through ``a/sub``, whose parent had become that symlink.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from torchkiln.errors import InputError
from torchkiln.images.archive import open_image
from torchkiln.images.export import export_archive_to_sif
from torchkiln.images.flatten import Flattener, flatten
from torchkiln.runner import Runner

Entry = tuple[str, str, object]


def layer(entries: list[Entry], **meta: int) -> bytes:
    """A layer tar of (kind, name, data): kinds dir, file, sym, hard, fifo; ``meta`` for every entry."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = meta.get("mtime", 1_600_000_000)
            ti.uid = ti.gid = meta.get("uid", 0)
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, meta.get("mode", 0o755)
                tf.addfile(ti)
            elif kind == "file":
                raw = data if isinstance(data, bytes) else str(data).encode()
                ti.size, ti.mode = len(raw), meta.get("mode", 0o644)
                tf.addfile(ti, io.BytesIO(raw))
            elif kind in ("sym", "hard"):
                ti.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                ti.linkname = str(data)
                tf.addfile(ti)
            elif kind == "fifo":
                ti.type, ti.mode = tarfile.FIFOTYPE, 0o644
                tf.addfile(ti)
    return buf.getvalue()


def archive(tmp_path: Path, layers: list[bytes], name: str = "image.docker.tar") -> Path:
    digests = ["sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers]
    cfg = {"architecture": "amd64", "created": "2024-01-02T03:04:05Z", "os": "linux",
           "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
           "rootfs": {"type": "layers", "diff_ids": digests}}
    cfg_raw = json.dumps(cfg).encode()
    cfg_name = hashlib.sha256(cfg_raw).hexdigest() + ".json"
    names = [f"{d[7:]}/layer.tar" for d in digests]
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": ["acme/x:1"], "Layers": names}]).encode()
    path = tmp_path / name
    with tarfile.open(path, "w") as tf:
        for member, raw in [(cfg_name, cfg_raw), *zip(names, layers, strict=True), ("manifest.json", manifest)]:
            ti = tarfile.TarInfo(member)
            ti.size = len(raw)
            tf.addfile(ti, io.BytesIO(raw))
    return path


def _outside(tmp_path: Path) -> tuple[Path, dict[str, tuple[int, int, int]]]:
    """A folder outside the root with a ``sub/`` and files, and the (mode, uid, mtime) of each."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub").chmod(0o700)
    (outside / "f").write_text("host file\n")
    for p in (outside / "sub", outside / "f", outside):
        os.utime(p, (1_700_000_000, 1_700_000_000))
    return outside, _state(outside)


def _state(folder: Path) -> dict[str, tuple[int, int, int]]:
    found = {}
    for p in [folder, *sorted(folder.rglob("*"))]:
        st = os.lstat(p)
        found[str(p.relative_to(folder))] = (st.st_mode, st.st_uid, int(st.st_mtime))
    return found


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


HOSTILE = {
    # a later layer swaps the parent of a directory for a symlink out of the root
    "later-layer-swap": lambda out: [
        layer([("dir", "a", ""), ("dir", "a/sub", "")], mode=0o777, uid=4242, mtime=0),
        layer([("sym", "a", str(out))]),
    ],
    # the same, within one layer
    "same-layer-swap": lambda out: [
        layer([("dir", "a", ""), ("dir", "a/sub", ""), ("sym", "a", str(out))], mode=0o777, uid=4242, mtime=0),
    ],
    # a relative link climbing out (.. stops at the root), then writes through it
    "relative-climb": lambda out: [
        layer([("dir", "a", ""), ("dir", "a/sub", "")], mode=0o777, uid=4242, mtime=0),
        layer([("sym", "a", "../../../../../../../../" + str(out).lstrip("/")), ("file", "a/f", "image file\n"),
               ("dir", "a/sub", "")], mode=0o777, uid=4242, mtime=0),
    ],
    # a file written through a symlink to the outside folder, then the symlink becomes a dir again
    "swap-back": lambda out: [
        layer([("sym", "a", str(out)), ("file", "a/f", "image file\n")], mode=0o777, uid=4242, mtime=0),
        layer([("file", ".wh.a", ""), ("dir", "a", ""), ("dir", "a/sub", "")], mode=0o777, uid=4242, mtime=0),
        layer([("sym", "a", str(out))]),
    ],
    # an opaque whiteout under a symlink to the outside folder must not empty it
    "opaque-through-link": lambda out: [
        layer([("sym", "a", str(out)), ("file", "a/.wh..wh..opq", ""), ("file", "a/.wh.f", "")]),
    ],
    # apptainer's own folder a symlink to the outside folder: the SIF layout must not write there
    "singularity-d-link": lambda out: [
        layer([("sym", ".singularity.d", str(out)), ("sym", "etc", str(out))]),
    ],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_flatten_never_touches_anything_outside_the_root(case: str, tmp_path: Path) -> None:
    outside, before = _outside(tmp_path)
    root = _root(tmp_path)
    layers = HOSTILE[case](outside)
    try:
        flatten((io.BytesIO(raw) for raw in layers), root)
    except InputError:
        pass  # refusing the image is fine too; writing outside is not
    assert _state(outside) == before


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_export_to_sif_never_touches_anything_outside_the_root(case: str, tmp_path: Path) -> None:
    outside, before = _outside(tmp_path)
    path = archive(tmp_path, HOSTILE[case](outside))
    with open_image(path) as image:
        try:
            export_archive_to_sif(image, tmp_path / "x.sif", "acme/x:1", Runner(), processors=1)
        except InputError:
            pass
    assert _state(outside) == before
    assert not any(p.name.startswith(".kiln-") for p in tmp_path.iterdir())


def test_directory_metadata_still_lands_on_real_directories(tmp_path: Path) -> None:
    root = _root(tmp_path)
    f = Flattener(root)
    f.apply(io.BytesIO(layer([("dir", "d", ""), ("dir", "d/e", "")], mode=0o750, uid=4242, mtime=0)))
    f.apply(io.BytesIO(layer([("file", "d/e/x", "x")])))
    f.finish()
    st = os.lstat(root / "d" / "e")
    assert (st.st_mode & 0o7777, int(st.st_mtime)) == (0o750, 0)
    if os.geteuid() == 0:
        assert st.st_uid == 4242


def test_hard_link_to_a_directory_and_dotdot_whiteouts_are_input_errors(tmp_path: Path) -> None:
    f = Flattener(_root(tmp_path))
    f.apply(io.BytesIO(layer([("dir", "d", ""), ("file", "d/x", "x")])))
    with pytest.raises(InputError, match="hard link"):
        f.apply(io.BytesIO(layer([("hard", "h", "d")])))
    f.apply(io.BytesIO(layer([("file", "../.wh.outside", "")])))  # ".." stops at the root: removes nothing outside


def test_a_whiteout_of_dotdot_and_a_name_too_long_are_input_errors(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (tmp_path / "keep").write_text("x")
    f = Flattener(root)
    f.apply(io.BytesIO(layer([("dir", "a", "")])))
    with pytest.raises(InputError, match="not a file name"):
        f.apply(io.BytesIO(layer([("file", "a/.wh...", "")])))
    with pytest.raises(InputError, match="longer than the file system allows"):
        f.apply(io.BytesIO(layer([("file", "n" * 300, "x")])))
    assert root.is_dir() and (tmp_path / "keep").is_file()


DEEP = 1200


def test_deep_trees_flatten_export_and_clean_up_without_recursion(tmp_path: Path) -> None:
    deep = "/".join(["d"] * DEEP)
    path = archive(tmp_path, [layer([("file", f"{deep}/leaf", "x"), ("dir", "bin", "")], mode=0o555)])
    with open_image(path) as image:
        sif, stats = export_archive_to_sif(image, tmp_path / "x.sif", "acme/x:1", Runner(), processors=1)
    assert stats.files == 1 and (tmp_path / "x.sif").is_file()
    assert not any(p.name.startswith(".kiln-") for p in tmp_path.iterdir())


def test_sparse_files_stay_sparse(tmp_path: Path) -> None:
    root = _root(tmp_path)
    raw = b"head" + bytes(64 << 20) + b"tail"
    flatten([io.BytesIO(layer([("file", "big", raw)]))], root)
    st = os.stat(root / "big")
    assert st.st_size == len(raw) and st.st_blocks * 512 < 4 << 20  # 64 MiB apparent, < 4 MiB on disk
    assert (root / "big").read_bytes()[-4:] == b"tail"


def _sparse_giant_layer(tmp_path: Path, size: int = 100 << 30) -> bytes:
    """A layer (a few KB) holding one sparse file of ``size`` bytes, made by GNU tar."""
    import shutil
    import subprocess

    tar = shutil.which("tar")
    if tar is None or b"GNU tar" not in subprocess.run([tar, "--version"], capture_output=True).stdout:
        pytest.skip("GNU tar (for a sparse archive member) is not installed")
    src = tmp_path / "sparse-src"
    src.mkdir()
    with open(src / "giant.bin", "wb") as f:
        f.write(b"head")
        f.truncate(size)
    subprocess.run([tar, "--sparse", "--format=pax", "-C", str(src), "-cf", str(tmp_path / "layer.tar"), "giant.bin"],
                   check=True)
    return (tmp_path / "layer.tar").read_bytes()


def test_a_sparse_giant_is_refused_by_export_before_it_is_squashed(tmp_path: Path, monkeypatch) -> None:
    import time

    monkeypatch.delenv("KILN_EXPORT_MAX_BYTES", raising=False)
    raw = _sparse_giant_layer(tmp_path)
    assert len(raw) < 64 * 1024
    path = archive(tmp_path, [raw])
    start = time.monotonic()
    with open_image(path) as image, pytest.raises(InputError, match="claim more than") as info:
        export_archive_to_sif(image, tmp_path / "x.sif", "acme/x:1", Runner(), processors=1)
    assert time.monotonic() - start < 10
    assert "KILN_EXPORT_MAX_BYTES" in info.value.hint and "/giant.bin" in info.value.message
    assert not (tmp_path / "x.sif").exists() and not any(p.name.startswith(".kiln-") for p in tmp_path.iterdir())


def test_a_sparse_giant_flattens_sparse_and_fast_when_allowed(tmp_path: Path) -> None:
    import time

    raw = _sparse_giant_layer(tmp_path)
    root = _root(tmp_path)
    start = time.monotonic()
    stats = flatten([io.BytesIO(raw)], root)
    st = os.stat(root / "giant.bin")
    assert time.monotonic() - start < 5 and st.st_size == 100 << 30 and st.st_blocks * 512 < 1 << 20
    assert stats.bytes == 100 << 30 and stats.allocated < 1 << 20
    assert (root / "giant.bin").open("rb").read(4) == b"head"


def _elf(path: Path, *, shoff: int, sections: int, size: int) -> Path:
    """A sparse ELF64 file of ``size`` bytes; ``sections`` in section 0's sh_size (extended numbering)."""
    import struct

    hdr = bytearray(64)
    hdr[0:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HHIQQQIHHHHHH", hdr, 16, 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 0, 0)
    with open(path, "wb") as f:
        f.write(hdr)
        if shoff:
            f.seek(shoff)
            f.write(struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, sections, 0, 0, 0, 64))
        f.truncate(size)
    return path


@pytest.mark.parametrize("case", ["a billion sections", "100 GB stripped"])
def test_giant_elf_claims_are_refused_quickly(case: str, tmp_path: Path, capsys) -> None:
    import time

    from torchkiln.cli import main

    path = (_elf(tmp_path / "x.so", shoff=4096, sections=10**9, size=100 << 30) if case == "a billion sections"
            else _elf(tmp_path / "x.so", shoff=0, sections=0, size=100 << 30))
    start = time.monotonic()
    code = main(["inspect", str(path)])
    err = capsys.readouterr().err
    assert code == 7 and "fix:" in err and "Traceback" not in err, err
    assert time.monotonic() - start < 10
