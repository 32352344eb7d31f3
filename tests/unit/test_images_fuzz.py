"""Property-based fuzzing of `kiln inspect` over malformed archives, wheels and ELF files.

Valid seeds (a docker-archive, an OCI layout tar, a wheel, an ELF file with fat binaries) are
mangled (truncated, bytes overwritten, bytes inserted); whatever comes out, `kiln inspect` must end
with exit 0 or 7, and an error exit prints an `error:` and a `fix:` line, never a traceback.
KILN_FUZZ_EXAMPLES raises the number of cases (the long run: 10000).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.cli import main
from torchkiln.errors import ExitCode

ELF = (Path(__file__).parent.parent / "fixtures" / "fatbin" / "multi.so").read_bytes()
EXAMPLES = int(os.environ.get("KILN_FUZZ_EXAMPLES", "150"))


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _seeds() -> dict[str, bytes]:
    layer = _tar({"usr/lib/libx.so": ELF, "etc/os-release": b"bookworm\n", "usr/lib/.wh.gone": b""})
    diff = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"os": "linux", "architecture": "amd64", "rootfs": {"type": "layers", "diff_ids": [diff]},
                         "history": [{"created_by": "RUN x"}]}).encode()
    cfg = hashlib.sha256(config).hexdigest()
    docker = _tar({f"{cfg}.json": config, "l/layer.tar": layer,
                   "manifest.json": json.dumps([{"Config": f"{cfg}.json", "RepoTags": ["a:1"],
                                                 "Layers": ["l/layer.tar"]}]).encode()})
    manifest = json.dumps({"schemaVersion": 2, "config": {"digest": f"sha256:{cfg}"},
                           "layers": [{"digest": diff, "mediaType": "application/vnd.oci.image.layer.v1.tar"}]}).encode()
    mdig = hashlib.sha256(manifest).hexdigest()
    oci = _tar({"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', f"blobs/sha256/{cfg}": config,
                f"blobs/sha256/{diff[7:]}": layer, f"blobs/sha256/{mdig}": manifest,
                "index.json": json.dumps({"manifests": [{"digest": f"sha256:{mdig}"}]}).encode()})
    wb = io.BytesIO()
    with zipfile.ZipFile(wb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x/_C.so", ELF)
        zf.writestr("x-1.0.dist-info/RECORD", "x/_C.so,,\n")
    return {"image.tar": docker, "oci.tar": oci, "x-1.0-py3-none-any.whl": wb.getvalue(), "lib.so": ELF}


SEEDS = _seeds()
edit = st.tuples(st.sampled_from(["cut", "set", "insert"]), st.floats(0, 1), st.binary(min_size=1, max_size=16))


def _mangle(data: bytes, edits: list[tuple[str, float, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, blob in edits:
        at = int(where * len(out))
        if kind == "cut":
            del out[at:]
        elif kind == "set":
            out[at : at + len(blob)] = blob
        else:
            out[at:at] = blob
    return bytes(out)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SEEDS)), edits=st.lists(edit, min_size=1, max_size=4))
def test_mangled_inputs_never_traceback(
    name: str, edits: list[tuple[str, float, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(_mangle(SEEDS[name], edits))
    code = main(["inspect", "--json", str(path)])
    _out, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.INPUT), err
    assert "Traceback" not in err
    if code != ExitCode.OK:
        assert "error:" in err and "fix:" in err, err


# -- hostile trees (issue #24): symlink swaps, deep nesting, special files, sparse giants ------------------

NAMES = ["a", "b", "a/b", "a/b/c", "b/a", ".singularity.d", ".singularity.d/env", "etc", "etc/hosts",
         "/".join(["d"] * 300), "a/" + "/".join(["n"] * 150)]
LINK_TARGETS = ["@OUT@", "@OUT@/sub", "../../../../@REL@", "/", "/etc", "a", "b/..", "a/b", "."]
hostile_entry = st.tuples(
    st.sampled_from(["dir", "file", "sym", "hard", "fifo", "whiteout", "opaque", "giant"]),
    st.sampled_from(NAMES),
    st.sampled_from(LINK_TARGETS),
    st.sampled_from([0o000, 0o555, 0o777, 0o4755]),
)


def _hostile_layer(entries: list[tuple[str, str, str, int]], outside: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, target, mode in entries:
            target = target.replace("@OUT@", str(outside)).replace("@REL@", str(outside).lstrip("/"))
            ti = tarfile.TarInfo(name)
            ti.mode, ti.uid, ti.gid, ti.mtime = mode, 4242, 4242, 0
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif kind in ("file", "giant"):
                data = b"x" * 64
                ti.size = len(data)
                if kind == "giant":  # claims far more than the layers hold (the budget refuses it)
                    data = bytes(1 << 20)
                    ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            elif kind in ("sym", "hard"):
                ti.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                ti.linkname = target
                tf.addfile(ti)
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
                tf.addfile(ti)
            elif kind == "whiteout":
                head, _, base = name.rpartition("/")
                wh = tarfile.TarInfo(f"{head}/.wh.{base}" if head else f".wh.{base}")
                tf.addfile(wh, io.BytesIO(b""))
            else:
                wh = tarfile.TarInfo(f"{name}/.wh..wh..opq")
                tf.addfile(wh, io.BytesIO(b""))
    return buf.getvalue()


def _snapshot(folder: Path) -> list[tuple[str, int, int, int]]:
    out = []
    for top, dirs, files in os.walk(folder):
        for n in [*dirs, *files]:
            st_ = os.lstat(os.path.join(top, n))
            out.append((os.path.relpath(os.path.join(top, n), folder), st_.st_mode, st_.st_uid, int(st_.st_mtime)))
    return sorted(out)


@settings(max_examples=max(EXAMPLES // 6, 20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(layers=st.lists(st.lists(hostile_entry, min_size=1, max_size=6), min_size=1, max_size=3))
def test_hostile_trees_stay_inside_the_root_and_never_traceback(
    layers: list[list[tuple[str, str, str, int]]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from torchkiln.errors import KilnError
    from torchkiln.images.confine import rmtree
    from torchkiln.images.flatten import flatten
    from torchkiln.images.sif import ImageConfig, add_singularity_layout

    tmp = tmp_path_factory.mktemp("hostile")
    outside = tmp / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "file").write_text("host\n")
    before = _snapshot(outside)
    root = tmp / "root"
    root.mkdir()
    raws = [_hostile_layer(entries, outside) for entries in layers]
    try:
        flatten((io.BytesIO(r) for r in raws), root, max_bytes=sum(map(len, raws)) * 2)
        add_singularity_layout(root, ImageConfig.from_json({"architecture": "amd64", "config": {}}), "x\n")
    except KilnError as e:  # refusing the image is fine: it says why, with a fix
        assert e.exit_code in (ExitCode.INPUT, ExitCode.FILES) and e.hint
    assert _snapshot(outside) == before
    rmtree(root)
    assert not root.exists()
