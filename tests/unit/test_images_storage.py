"""Reading an image in place from overlay layer folders (torchkiln.images.storage), on temporary trees.

The whiteout rules are overlay's: a 0/0 character device deletes its path, a folder with the
``trusted.overlay.opaque=y`` attribute hides the lower layers' contents. They must give the same
members a layer tar gives with ``.wh.`` names, in the same order, so every consumer applies one set
of rules. Character devices and trusted attributes need root (the engines' storage is root's too):
those tests skip without it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from torchkiln.engines import ImageDetails
from torchkiln.errors import InputError
from torchkiln.images.archive import iter_layer_stream
from torchkiln.images.layers import Member
from torchkiln.images.storage import (
    NotInPlace,
    _tags_for,
    iter_layer_dir,
    locate,
    locate_in_engine,
    remote_reason,
    stored_meta,
)
from torchkiln.inspect.waste import FileRecord, LayerFiles, merge_layers

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"


def _whiteout(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    except PermissionError:
        pytest.skip("creating a 0/0 character device (an overlay whiteout) needs root")


def _opaque(path: Path) -> None:
    for attr in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            os.setxattr(path, attr, b"y")
            return
        except OSError:
            continue
    pytest.skip("this file system keeps neither trusted.* nor user.* extended attributes")


def _key(m: Member) -> tuple[object, ...]:
    return (m.path, m.type, m.size, m.whiteout, m.linkname)


def _layer_tree(root: Path) -> None:
    """A layer folder as docker's overlay2 keeps it: files, a symlink, a hard link, whiteouts."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "b.conf").write_bytes(b"b" * 10)
    (root / "etc" / "a.conf").write_bytes(b"a" * 3)
    (root / "etc" / "gone").touch()
    (root / "etc" / "gone").unlink()
    _whiteout(root / "etc" / "gone")
    (root / "opt" / "venv" / "lib").mkdir(parents=True)
    _opaque(root / "opt" / "venv")
    (root / "opt" / "venv" / "lib" / "libk.so").write_bytes((FIXTURES / "multi.so").read_bytes())
    os.link(root / "opt" / "venv" / "lib" / "libk.so", root / "opt" / "venv" / "lib" / "libk.so.1")
    (root / "opt" / "venv" / "lib" / "libk-link.so").symlink_to("libk.so")
    (root / "a.b").write_bytes(b"x")  # walked after "a" and its contents (names sorted per folder)
    (root / "a").mkdir()
    (root / "a" / "z").write_bytes(b"z")


def _same_layer_as_tar(root: Path) -> bytes:
    """The tar docker save writes for ``_layer_tree`` (Go's walk order, .wh. names for whiteouts)."""
    buf = io.BytesIO()
    multi = (FIXTURES / "multi.so").read_bytes()

    def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.size, ti.linkname = kind, len(data), link
        tar.addfile(ti, io.BytesIO(data) if data else None)

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add("a/", tarfile.DIRTYPE)
        add("a/z", data=b"z")
        add("a.b", data=b"x")
        add("etc/", tarfile.DIRTYPE)
        add("etc/a.conf", data=b"a" * 3)
        add("etc/b.conf", data=b"b" * 10)
        add("etc/.wh.gone")
        add("opt/", tarfile.DIRTYPE)
        add("opt/venv/", tarfile.DIRTYPE)
        add("opt/venv/.wh..wh..opq")
        add("opt/venv/lib/", tarfile.DIRTYPE)
        add("opt/venv/lib/libk-link.so", tarfile.SYMTYPE, link="libk.so")
        add("opt/venv/lib/libk.so", data=multi)
        add("opt/venv/lib/libk.so.1", tarfile.LNKTYPE, link="opt/venv/lib/libk.so")
    return buf.getvalue()


def test_a_layer_folder_gives_the_members_its_tar_gives(tmp_path: Path) -> None:
    root = tmp_path / "diff"
    _layer_tree(root)
    from_dir = [_key(m) for m in iter_layer_dir(root)]
    from_tar = [_key(m) for m in iter_layer_stream(io.BytesIO(_same_layer_as_tar(root)), "layer")]
    # the order differs only where the tar puts a .wh. name among its siblings (".wh.gone" sorts
    # first); overlay's device sits at its own name: compare as sets, then the walk order alone
    assert sorted(from_dir, key=str) == sorted(from_tar, key=str)
    paths = [k[0] for k in from_dir]
    assert paths.index("a") < paths.index("a/z") < paths.index("a.b")  # a folder, its contents, then "a.b"
    assert paths.index("opt/venv") < paths.index("opt/venv/lib")
    opaque = [k for k in from_dir if k[3] == "opaque"]
    assert opaque == [("opt/venv", "file", 0, "opaque", "")]
    assert from_dir.index(opaque[0]) == from_dir.index(("opt/venv", "dir", 0, None, "")) + 1
    assert ("etc/gone", "file", 0, "file", "") in from_dir
    assert ("opt/venv/lib/libk.so.1", "hardlink", 0, None, "opt/venv/lib/libk.so") in from_dir


def test_member_content_is_read_from_the_file(tmp_path: Path) -> None:
    root = tmp_path / "diff"
    _layer_tree(root)
    members = {m.path: m for m in iter_layer_dir(root) if m.whiteout is None}
    lib = members["opt/venv/lib/libk.so"]
    assert lib.read_head(4) == b"\x7fELF"
    with lib.open_random() as f:
        f.seek(0, io.SEEK_END)
        assert f.tell() == lib.size == (FIXTURES / "multi.so").stat().st_size
    assert members["etc/b.conf"].read_all() == b"b" * 10


def test_whiteouts_apply_across_layer_folders(tmp_path: Path) -> None:
    lower, upper = tmp_path / "l1", tmp_path / "l2"
    (lower / "etc").mkdir(parents=True)
    (lower / "etc" / "gone").write_bytes(b"g" * 7)
    (lower / "etc" / "kept").write_bytes(b"k")
    (lower / "opt" / "venv" / "old").mkdir(parents=True)
    (lower / "opt" / "venv" / "old" / "x.py").write_bytes(b"p" * 5)
    (upper / "etc").mkdir(parents=True)
    _whiteout(upper / "etc" / "gone")
    (upper / "opt" / "venv").mkdir(parents=True)
    _opaque(upper / "opt" / "venv")
    (upper / "opt" / "venv" / "new.py").write_bytes(b"n")

    layers = []
    for i, d in enumerate((lower, upper)):
        lf = LayerFiles(i)
        for m in iter_layer_dir(d):
            if m.whiteout is not None:
                lf.whiteouts.append((m.path, m.whiteout))
            else:
                lf.records.append(FileRecord(m.path, i, m.type, m.size, m.linkname))
        layers.append(lf)
    final = merge_layers(layers)
    assert "etc/gone" not in final and "etc/kept" in final
    assert "opt/venv/new.py" in final and "opt/venv" in final
    assert not any(p.startswith("opt/venv/old") for p in final)


def test_literal_wh_names_in_a_folder_are_whiteouts(tmp_path: Path) -> None:
    """A driver that stores a layer tar as it came (no device nodes) keeps the .wh. names."""
    root = tmp_path / "diff"
    (root / "d").mkdir(parents=True)
    (root / "d" / ".wh.old").touch()
    (root / "d" / ".wh..wh..opq").touch()
    got = [_key(m) for m in iter_layer_dir(root)]
    assert ("d/old", "file", 0, "file", "") in got
    assert ("d", "file", 0, "opaque", "") in got


def test_a_vanished_layer_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="layer folder"):
        list(iter_layer_dir(tmp_path / "missing"))


# -- locate: where the engine keeps an image, checked ----------------------------------------------------

def _config() -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
        "history": [{"created_by": "/bin/sh -c #(nop) ADD file"}, {"created_by": "CMD [\"sh\"]", "empty_layer": True}],
    }).encode()


def _docker_store(tmp_path: Path) -> tuple[Path, str]:
    raw = _config()
    hexid = hashlib.sha256(raw).hexdigest()
    cfg = tmp_path / "image" / "overlay2" / "imagedb" / "content" / "sha256" / hexid
    cfg.parent.mkdir(parents=True)
    cfg.write_bytes(raw)
    diff = tmp_path / "overlay2" / "abc" / "diff"
    diff.mkdir(parents=True)
    return diff, hexid


def _locate(engine: str, diff: Path, hexid: str, **kw: object) -> object:
    args: dict[str, object] = dict(
        image_id=f"sha256:{hexid}", repo_tags=("kiln-test/x:1",), diff_ids=("sha256:" + "1" * 64,),
        driver={"docker": "overlay2", "podman": "overlay"}[engine], driver_data={"UpperDir": str(diff)}, env={},
    )
    args.update(kw)
    return locate(engine, "kiln-test/x:1", **args)  # type: ignore[arg-type]


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def test_locate_docker_overlay2(tmp_path: Path, as_root: None) -> None:
    diff, hexid = _docker_store(tmp_path)
    img = _locate("docker", diff, hexid)
    meta = stored_meta(img)  # type: ignore[arg-type]
    assert meta.format == "engine-storage" and meta.tags == ("kiln-test/x:1",)
    assert [ref.created_by for ref in meta.layers] == ["ADD file"]
    assert meta.layers[0].digest == "sha256:" + "1" * 64 and meta.os == "linux"


def test_locate_podman_overlay(tmp_path: Path, as_root: None) -> None:
    raw = _config()
    hexid = hashlib.sha256(raw).hexdigest()
    key = base64.b64encode(f"sha256:{hexid}".encode()).decode()
    (tmp_path / "overlay-images" / hexid).mkdir(parents=True)
    (tmp_path / "overlay-images" / hexid / f"={key}").write_bytes(raw)
    diff = tmp_path / "overlay" / "abc" / "diff"
    diff.mkdir(parents=True)
    assert _locate("podman", diff, hexid, image_id=hexid).config_raw == raw  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"env": {"DOCKER_HOST": "tcp://10.0.0.1:2376"}}, "remote"),
        ({"env": {"DOCKER_CONTEXT": "build-box"}}, "context"),
        ({"driver": "btrfs"}, "btrfs storage driver"),
        ({"diff_ids": ("sha256:a", "sha256:b")}, "1 layer folders for 2 layers"),
        ({"image_id": "sha256:" + "0" * 64}, "cannot read the image config"),
        ({"driver_data": {"UpperDir": "/nonexistent/overlay2/x/diff"}}, "not a folder on this machine"),
        ({"driver_data": {}}, "names no layer folder"),
    ],
)
def test_locate_refuses_what_it_cannot_read_in_place(
    tmp_path: Path, as_root: None, change: dict[str, object], reason: str
) -> None:
    diff, hexid = _docker_store(tmp_path)
    with pytest.raises(NotInPlace, match=reason):
        _locate("docker", diff, hexid, **change)


def test_locate_checks_the_config_is_the_images(tmp_path: Path, as_root: None) -> None:
    diff, hexid = _docker_store(tmp_path)
    cfg = tmp_path / "image" / "overlay2" / "imagedb" / "content" / "sha256" / hexid
    cfg.write_bytes(b"{}")
    with pytest.raises(NotInPlace, match="is not the config"):
        _locate("docker", diff, hexid)


def test_locate_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    diff, hexid = _docker_store(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NotInPlace, match="needs root"):
        _locate("docker", diff, hexid)


def test_remote_reasons_and_tags() -> None:
    assert remote_reason("docker", {"DOCKER_HOST": "unix:///run/kd2.sock"}) is None
    assert remote_reason("podman", {"CONTAINER_HOST": "ssh://core@host/run/podman.sock"})
    assert _tags_for("torchkiln/example-cpu", ("torchkiln/example-cpu:latest", "other:1")) == (
        "torchkiln/example-cpu:latest",)
    assert _tags_for("kiln-base:bookworm", ("localhost/kiln-base:bookworm",)) == ("localhost/kiln-base:bookworm",)
    assert _tags_for("sha256:abc", ("x:1",)) == ()
    assert _tags_for("app:1", ("someone/app:1", "app:1")) == ("app:1",)
    assert _tags_for("docker.io/library/ubuntu:22.04", ("ubuntu:22.04",)) == ("ubuntu:22.04",)


def test_locate_in_engine_is_the_one_in_place_decision_of_facts_and_inspect(tmp_path: Path) -> None:
    """``read`` export asks nothing; auto returns why not; direct makes that an input error with the caller's hint;
    the engine's own runner environment counts (a remote DOCKER_HOST of its own)."""

    class Runner:
        env = {"DOCKER_HOST": "tcp://10.0.0.9:2376"}

    class Engine:
        name = "docker"
        runner = Runner()

    diff, hexid = _docker_store(tmp_path)
    details = ImageDetails(id=f"sha256:{hexid}", size=1, layers=1, user="", env=(), labels={}, created="",
                           diff_ids=("sha256:" + "0" * 64,), driver="overlay2",
                           driver_data={"UpperDir": str(diff)})
    engine = Engine()
    assert locate_in_engine(engine, "x", details, "export", direct_hint="h") == (None, None)  # type: ignore[arg-type]
    assert locate_in_engine(engine, "x", details, "auto", direct_hint="h") == (  # type: ignore[arg-type]
        None, "docker is remote (DOCKER_HOST=tcp://10.0.0.9:2376)")
    with pytest.raises(InputError, match="cannot be read in place from docker's storage: docker is remote") as e:
        locate_in_engine(engine, "x", details, "direct", direct_hint="the hint")  # type: ignore[arg-type]
    assert e.value.hint == "the hint"
