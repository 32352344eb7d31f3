"""Image readers (docker-archive, OCI layout as directory or tar, gzip/zstd layers) and `kiln inspect`.

The archives are written here with tarfile, in the formats docker save and OCI tools produce, so the
tests need no container engine (tests/integration/test_inspect_image.py builds a real one).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torchkiln.arch import Capability
from torchkiln.cli import main
from torchkiln.errors import InputError
from torchkiln.images.archive import ImageArchive
from torchkiln.inspect.analyze import inspect_path, looks_like_path, owners_from_metadata
from torchkiln.inspect.coverage import Target

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"
MULTI = (FIXTURES / "multi.so").read_bytes()
SP = "opt/venv/lib/python3.11/site-packages"
TARGETS = (Target("H100", Capability(9, 0)), Target("T4", Capability(7, 5)), Target("8.6", Capability(8, 6)))


@dataclass
class Layer:
    files: dict[str, bytes | None] = field(default_factory=dict)  # None = directory
    links: dict[str, str] = field(default_factory=dict)
    created_by: str = "RUN true"

    def tar(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in self.files.items():
                ti = tarfile.TarInfo(name)
                if data is None:
                    ti.type = tarfile.DIRTYPE
                    ti.mode = 0o755
                    tar.addfile(ti)
                else:
                    ti.size = len(data)
                    ti.mode = 0o755
                    tar.addfile(ti, io.BytesIO(data))
            for name, target in self.links.items():
                ti = tarfile.TarInfo(name)
                ti.type = tarfile.SYMTYPE
                ti.linkname = target
                tar.addfile(ti)
        return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))


def _config(layers: list[Layer], diff_ids: list[str]) -> bytes:
    history = [{"created_by": "/bin/sh -c #(nop)  ENV PATH=/opt/venv/bin", "empty_layer": True}]
    for layer in layers:
        history.append({"created_by": layer.created_by + " # buildkit"})
    history.append({"created_by": 'CMD ["python"]', "empty_layer": True})
    return json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}, "history": history}
    ).encode()


def docker_archive(path: Path, layers: list[Layer], tag: str = "test/waste:1") -> Path:
    blobs = [layer.tar() for layer in layers]
    diff_ids = ["sha256:" + hashlib.sha256(b).hexdigest() for b in blobs]
    config = _config(layers, diff_ids)
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"
    with tarfile.open(path, "w") as tar:
        names = []
        for i, blob in enumerate(blobs):
            name = f"{i:064x}/layer.tar"
            _add(tar, name, blob)
            names.append(name)
        _add(tar, cfg_name, config)
        _add(tar, "manifest.json", json.dumps([{"Config": cfg_name, "RepoTags": [tag], "Layers": names}]).encode())
    return path


def oci_layout(dest: Path, layers: list[Layer], *, compression: str = "gzip", as_tar: bool = False) -> Path:
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}'}
    raw = [layer.tar() for layer in layers]
    diff_ids = ["sha256:" + hashlib.sha256(b).hexdigest() for b in raw]
    descs = []
    for blob in raw:
        if compression == "gzip":
            blob, mt = gzip.compress(blob), "application/vnd.oci.image.layer.v1.tar+gzip"
        elif compression == "zstd":
            import zstandard

            blob, mt = zstandard.ZstdCompressor().compress(blob), "application/vnd.oci.image.layer.v1.tar+zstd"
        else:
            mt = "application/vnd.oci.image.layer.v1.tar"
        digest = hashlib.sha256(blob).hexdigest()
        files[f"blobs/sha256/{digest}"] = blob
        descs.append({"mediaType": mt, "digest": f"sha256:{digest}", "size": len(blob)})
    config = _config(layers, diff_ids)
    cdig = hashlib.sha256(config).hexdigest()
    files[f"blobs/sha256/{cdig}"] = config
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": f"sha256:{cdig}"},
            "layers": descs,
        }
    ).encode()
    mdig = hashlib.sha256(manifest).hexdigest()
    files[f"blobs/sha256/{mdig}"] = manifest
    attestation = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{mdig}",
        "platform": {"architecture": "unknown", "os": "unknown"},
        "annotations": {"vnd.docker.reference.type": "attestation-manifest"},
    }
    index = {
        "schemaVersion": 2,
        "manifests": [
            attestation,
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{mdig}",
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": "1"},
            },
        ],
    }
    files["index.json"] = json.dumps(index).encode()
    if as_tar:
        with tarfile.open(dest, "w") as tar:
            for name, data in files.items():
                _add(tar, name, data)
    else:
        for name, data in files.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)
    return dest


def record(dist: str, paths: list[str]) -> bytes:
    return "".join(f"{p},sha256=x,1\n" for p in paths).encode() + f"{dist}.dist-info/RECORD,,\n".encode()


def sample_layers() -> list[Layer]:
    return [
        Layer(
            {
                "usr": None,
                "usr/bin/true": b"\x7fELF-not-really-but-short",
                "var/lib/apt/lists/deb_Packages": b"P" * 123_457,
                "root/.cache/pip/http/a/b/c": b"c" * 300_000,
                "big.bin": b"\0" * 1_048_576,
                "etc/over": b"o" * 5000,
            },
            created_by="RUN apt-get update && pip install x",
        ),
        Layer(
            {
                f"{SP}/mylib/libk.so": MULTI,
                f"{SP}/mylib-1.0.dist-info/RECORD": record("mylib-1.0", ["mylib/libk.so"]),
                "opt/venv/pyvenv.cfg": b"home = /usr/bin\n",
                "etc/over": b"new",
                "tmp/old/libk.so": MULTI,
            },
            links={f"{SP}/mylib/libk.so.1": "libk.so"},
            created_by="COPY --from=builder /opt/venv /opt/venv",
        ),
        Layer({".wh.big.bin": b"", "tmp/.wh.old": b"", "lib/libfake.so": b"INPUT(-lc)\n" * 10}, created_by="RUN rm"),
    ]


def check_sample(report_dict: dict[str, object]) -> None:
    waste = report_dict["waste"]
    assert isinstance(waste, dict)
    cats = {c["category"]: c for c in waste["categories"]}
    assert cats["deleted"]["items"][0] == {
        "path": "/big.bin",
        "bytes": 1_048_576,
        "files": 1,
        "layer": 0,
        "removed_in": 2,
    }
    assert {i["path"]: i["bytes"] for i in cats["deleted"]["items"]} == {"/big.bin": 1_048_576, "/tmp/old": len(MULTI)}
    assert cats["overwritten"]["items"] == [
        {"path": "/etc/over", "bytes": 5000, "files": 1, "layer": 0, "removed_in": 1}
    ]
    assert cats["pip-cache"]["bytes"] == 300_000 and cats["pip-cache"]["items"][0]["path"] == "/root/.cache/pip"
    assert cats["apt-lists"]["items"][0]["path"] == "/var/lib/apt/lists/deb_Packages"
    assert cats["apt-lists"]["bytes"] == 123_457
    binaries = report_dict["binaries"]
    assert isinstance(binaries, list) and len(binaries) == 1  # the deleted copy in /tmp/old is gone
    b = binaries[0]
    assert b["path"] == f"/{SP}/mylib/libk.so" and b["package"] == "mylib" and b["version"] == "1.0"
    assert b["layer"] == 1
    assert [(e["kind"], e["arch"], e["compressed"]) for e in b["entries"]] == [
        ("sass", "sm_75", False),
        ("sass", "sm_80", False),
        ("sass", "sm_90", False),
        ("sass", "sm_90a", False),
        ("sass", "sm_75", False),
        ("sass", "sm_80", False),
        ("ptx", "compute_90", True),
        ("sass", "sm_90", False),
        ("sass", "sm_90a", False),
    ]
    assert b["coverage"]["8.6"] == {"runs": True, "entry": "sm_80", "how": "sass-compatible", "embedded": False}
    assert b["failing"] == []
    layers = report_dict["image"]["layers"]  # type: ignore[index]
    assert [x["created_by"] for x in layers] == [
        "RUN apt-get update && pip install x",
        "COPY --from=builder /opt/venv /opt/venv",
        "RUN rm",
    ]
    assert layers[0]["wasted"] == 1_048_576 + 5000 + 300_000 + 123_457


def test_docker_archive(tmp_path: Path) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    report = inspect_path(path, TARGETS)
    assert report.image is not None and report.image.format == "docker-archive"
    assert report.image.tags == ("test/waste:1",)
    d = report.to_dict()
    check_sample(d)
    assert d["summary"]["cuda_binaries"] == 1 and d["summary"]["elf_files"] == 2  # type: ignore[index]


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
@pytest.mark.parametrize("as_tar", [False, True], ids=["dir", "tar"])
def test_oci_layout(tmp_path: Path, compression: str, as_tar: bool) -> None:
    dest = tmp_path / ("oci.tar" if as_tar else "oci")
    if not as_tar:
        dest.mkdir()
    oci_layout(dest, sample_layers(), compression=compression, as_tar=as_tar)
    report = inspect_path(dest, TARGETS)
    assert report.image is not None and report.image.format == "oci-layout"
    assert {layer.compression for layer in report.image.layers} == {compression}
    check_sample(report.to_dict())


def test_layer_members_and_whiteouts(tmp_path: Path) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    with ImageArchive(path) as img:
        assert len(img.meta.layers) == 3 and img.meta.os == "linux"
        members = list(img.iter_layer(img.meta.layers[2]))
    assert [(m.path, m.whiteout) for m in members] == [
        ("big.bin", "file"),
        ("tmp/old", "file"),
        ("lib/libfake.so", None),
    ]


def test_truncated_archive_is_an_input_error(tmp_path: Path) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    data = path.read_bytes()
    with tarfile.open(path) as tar:
        offsets = {m.name: m.offset_data for m in tar.getmembers()}
    layer2 = offsets[f"{2:064x}/layer.tar"]
    # inside a layer blob, inside the manifest, and right after the first layer's tar header
    for cut in (len(data) // 3, offsets["manifest.json"] + 10, offsets[f"{0:064x}/layer.tar"] + 512, layer2 + 700):
        bad = tmp_path / f"cut{cut}.tar"
        bad.write_bytes(data[:cut])
        with pytest.raises(InputError, match="truncated|not a readable tar|incomplete"):
            inspect_path(bad, TARGETS)


def test_archive_without_manifest_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "plain.tar"
    with tarfile.open(path, "w") as tar:
        _add(tar, "hello.txt", b"hi")
    with pytest.raises(InputError, match="neither a docker-archive"):
        inspect_path(path, TARGETS)


def test_wheel(tmp_path: Path) -> None:
    whl = tmp_path / "mylib-2.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mylib/libk.so", MULTI)
        zf.writestr("mylib/rdc.so", (FIXTURES / "rdc.so").read_bytes())
        zf.writestr("mylib/plain.so", (FIXTURES / "plain.so").read_bytes())
        zf.writestr("mylib/__init__.py", "")
        zf.writestr("mylib-2.0.dist-info/RECORD", "")
    report = inspect_path(whl, TARGETS)
    assert report.kind == "wheel"
    assert [(b.path, b.package, b.version) for b in report.binaries] == [
        ("mylib/libk.so", "mylib", "2.0"),
        ("mylib/rdc.so", "mylib", "2.0"),
    ]
    assert [t.key for t in report.binaries[1].failing] == ["9.0", "7.5"]  # rdc.so has sm_80 only
    assert report.packages[0].failing == {"9.0": ("mylib/rdc.so",), "7.5": ("mylib/rdc.so",), "8.6": ()}
    assert report.stats.elf_files == 3


def test_owners_from_metadata() -> None:
    owners = owners_from_metadata(
        {
            f"{SP}/nvidia_cublas-13.1.1.3.dist-info/RECORD": b"nvidia/cublas/lib/libcublas.so.13,sha256=x,1\n"
            b"../../../bin/tool,,\n",
            "var/lib/dpkg/status": b"Package: libcudnn9\nVersion: 9.1.0-1\n\nPackage: other\nVersion: 1\n",
            "var/lib/dpkg/info/libcudnn9:amd64.list": b"/.\n/usr/lib/x86_64-linux-gnu/libcudnn.so.9\n",
            "opt/conda/conda-meta/nccl-2.1-h1.json": json.dumps(
                {"name": "nccl", "version": "2.1", "files": ["lib/libnccl.so.2"]}
            ).encode(),
        }
    )
    assert owners[f"{SP}/nvidia/cublas/lib/libcublas.so.13"] == ("nvidia-cublas", "13.1.1.3")
    assert owners["opt/venv/bin/tool"] == ("nvidia-cublas", "13.1.1.3")
    assert owners["usr/lib/x86_64-linux-gnu/libcudnn.so.9"] == ("libcudnn9", "9.1.0-1")
    assert owners["opt/conda/lib/libnccl.so.2"] == ("nccl", "2.1")


def test_looks_like_path() -> None:
    for arg in ("./img.tar", "/tmp/x", "lib.so.2", "image.tar", "dist/torch.whl", "~/x"):
        assert looks_like_path(arg), arg
    for arg in ("kiln/app:1", "nvcr.io/nvidia/pytorch:24.05-py3", "busybox", "localhost:5000/a/b"):
        assert not looks_like_path(arg), arg


# -- the command ------------------------------------------------------------------------------------
def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_on_an_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    code, out, _ = run_cli(capsys, str(path), "--targets", "H100,T4", "-t", "8.6", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["targets"] == [
        {"name": "H100", "capability": "9.0"},
        {"name": "T4", "capability": "7.5"},
        {"name": "8.6", "capability": "8.6"},
    ]
    check_sample(d)


def test_cli_tables_on_an_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    code, out, _ = run_cli(capsys, str(path), "-t", "H100", "--binaries")
    assert code == 0
    for text in ("Layers", "Wasted bytes", "/big.bin", "/root/.cache/pip", "Per package", "mylib", "libk.so"):
        assert text in out, text


def test_cli_single_binary_and_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(FIXTURES / "rdc.so"), "-t", "A100", "--json")
    assert code == 0 and json.loads(out)["binaries"][0]["failing"] == []
    code, out, _ = run_cli(capsys, str(FIXTURES / "rdc.so"), "-t", "H100", "--check")
    assert code == 1 and "No kernel image" in out
    code, out, _ = run_cli(capsys, str(FIXTURES / "multi.so"), "-t", "H100", "--entries")
    assert code == 0 and "compute_90" in out and "zstd" in out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.joinpath("libfake.so").write_text("INPUT(-lc)\n"), "is not an ELF file"),
        (lambda p: p.joinpath("libcut.so").write_bytes(MULTI[:20000]), "damaged ELF file"),
        (lambda p: p.joinpath("x.tar").write_bytes(b"\0" * 10), "empty|not an image archive"),
        (lambda p: p.joinpath("x.tar.gz").write_bytes(gzip.compress(b"x" * 600)), "compressed file"),
        (lambda p: p.joinpath("bad.whl").write_bytes(b"PK\x03\x04" + b"\0" * 600), "not a readable wheel"),
    ],
    ids=["not-elf", "truncated-elf", "garbage", "gzip", "bad-zip"],
)
def test_cli_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message) -> None:  # type: ignore[no-untyped-def]
    make(tmp_path)
    target = next(p for p in tmp_path.iterdir())
    code, out, err = run_cli(capsys, str(target), "-t", "H100")
    assert code == 7, err
    assert "Traceback" not in err + out
    import re

    assert re.search(message, err), err


def test_cli_missing_file_and_unknown_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, str(tmp_path / "nope.tar"))
    assert code == 7 and "no such file" in err
    code, _, err = run_cli(capsys, str(FIXTURES / "multi.so"), "-t", "H1000")
    assert code == 4 and "H100" in err and "Traceback" not in err


def test_cli_embedded_kernels_are_found_and_marked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(FIXTURES / "embedded.so"), "-t", "T4,H100", "--json", "--check")
    assert code == 0
    (b,) = json.loads(out)["binaries"]
    assert [e["arch"] for e in b["entries"]] == ["sm_75", "sm_75"]
    assert b["embedded"] == {
        "sections": [".kernels"],
        "entries": 3,
        "other_entries": 0,
        "archs": ["sm_80", "sm_90", "compute_90"],
    }
    assert b["coverage"]["9.0"] == {"runs": True, "entry": "sm_90", "how": "sass", "embedded": True}
    assert b["coverage"]["7.5"]["embedded"] is False
    code, out, _ = run_cli(capsys, str(FIXTURES / "embedded.so"), "-t", "H100")
    assert "(in .kernels)" in out and "loads itself" in out


def test_damaged_elf_inside_an_image_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layers = [Layer({"usr/lib/libcut.so": MULTI[:30000], "usr/lib/libk.so": MULTI})]
    path = docker_archive(tmp_path / "img.tar", layers)
    report = inspect_path(path, TARGETS)
    errors = {b.path: b.error for b in report.binaries if b.error}
    assert list(errors) == ["/usr/lib/libcut.so"] and "truncated" in (errors["/usr/lib/libcut.so"] or "")
    assert [b.path for b in report.binaries if b.entries] == ["/usr/lib/libk.so"]
    assert report.to_dict()["summary"]["errors"] == 1  # type: ignore[index]
    code, out, _ = run_cli(capsys, str(path), "-t", "H100")
    assert code == 0 and "unreadable ELF file" in out


def test_streamed_archive_gives_the_same_report_as_the_file(tmp_path: Path) -> None:
    from torchkiln.inspect.analyze import inspect_image_stream

    path = docker_archive(tmp_path / "img.tar", sample_layers())
    from_file = inspect_path(path, TARGETS, tag="test/waste:1").to_dict()
    with path.open("rb") as f:
        streamed = inspect_image_stream(f, TARGETS, source=str(path), tag="test/waste:1").to_dict()
    assert streamed == from_file  # the JSON report holds no timings: identical, archive size included


def test_archive_read_from_a_pipe_gives_the_same_report(tmp_path: Path) -> None:
    """The engine's save arrives on a pipe: skipped content is spliced away, the report is the file's."""
    import os
    import threading

    from torchkiln.inspect.analyze import inspect_image_stream

    path = docker_archive(tmp_path / "img.tar", sample_layers())
    from_file = inspect_path(path, TARGETS, tag="test/waste:1").to_dict()
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as out:
            out.write(path.read_bytes())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        streamed = inspect_image_stream(r, TARGETS, source=str(path), tag="test/waste:1").to_dict()
    finally:
        writer.join()
        os.close(r)
    assert streamed == from_file


@pytest.mark.parametrize("through_pipe", [True, False])
def test_forward_reader_reads_peeks_and_skips(through_pipe: bool) -> None:
    import os
    import threading

    from torchkiln.images._io import ForwardReader, Window

    data = bytes(range(256)) * 40_000  # 10 MB, bigger than the reader's buffer
    if through_pipe:
        r, w = os.pipe()
        writer = threading.Thread(target=_write_all, args=(w, data))
        writer.start()
        reader = ForwardReader(r, buffer_size=1 << 16)
    else:
        reader = ForwardReader(io.BytesIO(data), buffer_size=1 << 16)
    assert reader.peek(4) == data[:4] and reader.tell() == 0
    assert reader.read(3) == data[:3]
    reader.seek(100_000)  # skipped: spliced to /dev/null from a pipe
    assert reader.read(10) == data[100_000:100_010]
    big = reader.read(3_000_000)  # larger than the buffer: read straight into the result
    assert big == data[100_010:3_100_010]
    window = Window(reader, 1000)
    assert window.peek(8) == data[3_100_010:3_100_018]
    window.seek(990)
    assert window.read() == data[3_100_010 + 990:3_101_010] and window.read() == b""
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(5)
    reader.seek(1 << 62)  # to the end
    assert reader.tell() == len(data) and reader.read(1) == b""
    if through_pipe:
        writer.join()
        os.close(r)
    reader.close()


def _write_all(fd: int, data: bytes) -> None:
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)


def test_progress_names_the_layer_and_the_megabytes(tmp_path: Path) -> None:
    path = docker_archive(tmp_path / "img.tar", sample_layers())
    seen: list[str] = []
    inspect_path(path, TARGETS, progress=seen.append)
    assert seen and all(" MB; layer " in s for s in seen)
    layers = len(sample_layers())
    assert any(f"layer {layers}/{layers}:" in s for s in seen)
