"""Our SIF writer and reader, checked against Debian's siftool, and the /.singularity.d layout."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, InputError
from torchkiln.images.sif import (
    DATA_OFFSET,
    DESCRIPTOR_SIZE,
    DESCRIPTORS_OFFSET,
    INSPECT_METADATA,
    OCI_CONFIG,
    DataType,
    ImageConfig,
    PartType,
    SifObject,
    add_singularity_layout,
    build_date,
    docker_env_script,
    oci_runscript,
    parse_created,
    read_sif,
    write_image_sif,
    write_sif,
)
from torchkiln.runner import Runner

SIFTOOL = shutil.which("siftool")
MKSQUASHFS = shutil.which("mksquashfs")
needs_siftool = pytest.mark.skipif(SIFTOOL is None, reason="siftool not installed (apt-get install siftool)")
needs_squashfs = pytest.mark.skipif(MKSQUASHFS is None, reason="mksquashfs not installed (squashfs-tools)")

DEF = b"Bootstrap: docker-daemon\nFrom: acme/x:1\n"


def _objects(tmp_path: Path, payload: bytes = b"hsqs" + b"\0" * 5000) -> list[SifObject]:
    part = tmp_path / "part.bin"
    part.write_bytes(payload)
    return [
        SifObject(DataType.DEFFILE, data=DEF),
        SifObject(DataType.GENERIC_JSON, INSPECT_METADATA, data=b'{"type":"container"}'),
        SifObject(DataType.PARTITION, path=part, part_type=PartType.PRIMSYS, arch="amd64"),
    ]


def test_write_then_read_round_trip_and_layout(tmp_path: Path) -> None:
    img = write_sif(tmp_path / "a.sif", _objects(tmp_path), image_id=uuid.UUID(int=7), created=1_700_000_000)
    h = img.header
    assert (h.launch, h.version, h.arch, h.id) == ("#!/usr/bin/env run-singularity\n", "01", "amd64", uuid.UUID(int=7))
    assert (h.descriptors_total, h.descriptors_free, h.descriptors_offset) == (48, 45, DESCRIPTORS_OFFSET)
    assert h.descriptors_size == 48 * DESCRIPTOR_SIZE and h.data_offset == DATA_OFFSET == 32176
    d = img.descriptors
    assert [x.type_name for x in d] == ["DEFFILE", "GENERIC_JSON", "PARTITION"]
    assert [x.id for x in d] == [1, 2, 3] and all(x.group_id == 1 and x.linked_id == 0 for x in d)
    assert all(x.offset % 4096 == 0 for x in d)  # page-aligned, as apptainer's library writes them
    assert d[0].offset == 32768 and d[0].size_with_padding == 32768 - DATA_OFFSET + len(DEF)
    assert sum(x.size_with_padding for x in d) == h.data_size
    assert (tmp_path / "a.sif").stat().st_size == d[2].offset + d[2].size
    assert d[2].partition == (1, 2, "amd64") and img.primary_partition() == d[2]
    assert img.deffile == DEF.decode() and img.by_name(INSPECT_METADATA) == d[1]
    assert img.json_object(INSPECT_METADATA) == {"type": "container"}
    assert img.read(d[2], 4) == b"hsqs"
    assert os.access(tmp_path / "a.sif", os.X_OK)


def test_same_inputs_same_bytes(tmp_path: Path) -> None:
    a = write_sif(tmp_path / "a.sif", _objects(tmp_path), image_id=uuid.UUID(int=1), created=5)
    b = write_sif(tmp_path / "b.sif", _objects(tmp_path), image_id=uuid.UUID(int=1), created=5)
    assert a.path.read_bytes() == b.path.read_bytes()


@needs_siftool
def test_siftool_lists_what_we_write(tmp_path: Path) -> None:
    sif = tmp_path / "a.sif"
    write_sif(sif, _objects(tmp_path), image_id=uuid.UUID(int=9), created=1_700_000_000)
    listing = subprocess.run([SIFTOOL, "list", str(sif)], capture_output=True, text=True, check=True).stdout
    rows = [ln.split("|") for ln in listing.splitlines() if ln[:1].isdigit()]
    assert [r[-1].strip() for r in rows] == ["Def.FILE", "JSON.Generic", "FS (Squashfs/*System/amd64)"]
    assert [r[2].strip() for r in rows] == ["NONE"] * 3
    header = subprocess.run([SIFTOOL, "header", str(sif)], capture_output=True, text=True, check=True).stdout
    assert "Primary Architecture: amd64" in header and "00000000-0000-0000-0000-000000000009" in header
    dump = subprocess.run([SIFTOOL, "dump", "1", str(sif)], capture_output=True, check=True).stdout
    assert dump == DEF


@needs_siftool
def test_we_read_what_siftool_writes(tmp_path: Path) -> None:
    sif = tmp_path / "s.sif"
    (tmp_path / "d.def").write_bytes(DEF)
    (tmp_path / "p.bin").write_bytes(b"hsqs" + b"x" * 100)
    for args in (["new", str(sif)], ["add", str(sif), str(tmp_path / "d.def"), "--datatype", "1"],
                 ["add", str(sif), str(tmp_path / "p.bin"), "--datatype", "4", "--parttype", "2", "--partfs", "1",
                  "--partarch", "2"]):
        subprocess.run([SIFTOOL, *args], check=True, capture_output=True)
    img = read_sif(sif)
    assert img.header.arch == "amd64" and img.deffile == DEF.decode()
    part = img.primary_partition()
    assert part is not None and part.partition == (1, 2, "amd64") and img.read(part) == b"hsqs" + b"x" * 100


def test_corrupt_and_foreign_files_are_input_errors(tmp_path: Path) -> None:
    good = write_sif(tmp_path / "a.sif", _objects(tmp_path), image_id=uuid.UUID(int=1), created=5).path
    bad = tmp_path / "bad.sif"
    bad.write_bytes(b"not a sif at all" * 20)
    with pytest.raises(InputError, match="SIF_MAGIC") as e:
        read_sif(bad)
    assert e.value.exit_code == ExitCode.INPUT
    trunc = tmp_path / "trunc.sif"
    trunc.write_bytes(good.read_bytes()[:40000])
    with pytest.raises(InputError, match="outside the file"):
        read_sif(trunc)
    with pytest.raises(InputError, match="at most one primary"):
        write_sif(tmp_path / "x.sif", _objects(tmp_path) + _objects(tmp_path)[2:], image_id=uuid.UUID(int=1),
                  created=5)
    assert not (tmp_path / "x.sif").exists() and not list(tmp_path.glob(".x.sif.*"))


def test_docker_env_script_keeps_values_exact_and_lets_the_host_override(tmp_path: Path) -> None:
    env = ["PATH=/opt/venv/bin:/usr/bin:/bin", 'WEIRD=a "b" $c `d` \\e; f', "SPACES=/my data/x", "1BAD=x", "EMPTY"]
    script = tmp_path / "env.sh"
    script.write_text(docker_env_script(env))
    reader = 'import json, os; print(json.dumps({k: os.environ.get(k) for k in ("PATH", "WEIRD", "SPACES", "EMPTY")}))'
    run = ["sh", "-c", f'. {script}; exec python3 -c "$0"', reader]
    got = json.loads(subprocess.run(run, capture_output=True, text=True, check=True,
                                    env={"PATH": "/usr/bin:/bin"}).stdout)
    assert got == {"PATH": "/opt/venv/bin:/usr/bin:/bin", "WEIRD": 'a "b" $c `d` \\e; f', "SPACES": "/my data/x",
                   "EMPTY": ""}
    got = json.loads(subprocess.run(run, capture_output=True, text=True, check=True,
                                    env={"PATH": "/usr/bin:/bin", "SPACES": "from host"}).stdout)
    assert got["SPACES"] == "from host"


@pytest.mark.parametrize(
    ("entrypoint", "cmd", "args", "expected"),
    [
        ((), ("echo", "cmd 1"), [], "cmd 1|WD"),
        ((), ("echo", "cmd 1"), ["echo", "arg  2"], "arg  2|HERE"),
        (("echo", "ep"), ("c1",), [], "ep c1|WD"),
        (("echo", "ep"), ("c1",), ["a'b"], "ep a'b|HERE"),
    ],
)
def test_oci_runscript_semantics(tmp_path: Path, entrypoint: tuple[str, ...], cmd: tuple[str, ...], args: list[str],
                                 expected: str) -> None:
    wd = tmp_path / "work dir"
    wd.mkdir()
    here = tmp_path / "here"
    here.mkdir()
    script = tmp_path / "runscript"
    cfg = ImageConfig(entrypoint=entrypoint, cmd=cmd, workdir=str(wd))
    # append the working directory to what the command prints, to see where it ran
    script.write_text(oci_runscript(cfg).replace('exec "$@"', '"$@" | tr "\\n" "|"; pwd'))
    r = subprocess.run(["sh", str(script), *args], capture_output=True, text=True, cwd=here)
    assert r.returncode == 0, r.stderr
    out = r.stdout.replace(str(wd), "WD").replace(str(here), "HERE").replace("\n", "")
    assert out == expected


def test_runscript_without_a_command_says_so(tmp_path: Path) -> None:
    script = tmp_path / "runscript"
    script.write_text(oci_runscript(ImageConfig()))
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    assert r.returncode == 1 and "no ENTRYPOINT or CMD" in r.stderr


def test_layout_matches_apptainers(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("127.0.0.1 builder\n")
    cfg = ImageConfig(env=("PATH=/usr/bin:/bin",), cmd=("python",), labels={"a": "b<c>&"}, created=1_700_000_000)
    meta = add_singularity_layout(root, cfg, DEF.decode())
    sd = root / ".singularity.d"
    for rel in ("actions/exec", "actions/run", "actions/shell", "actions/start", "actions/test", "env/01-base.sh",
                "env/10-docker2singularity.sh", "env/90-environment.sh", "env/95-apps.sh", "env/99-base.sh",
                "env/99-runtimevars.sh", "runscript", "startscript"):
        assert stat.S_IMODE((sd / rel).stat().st_mode) == 0o755, rel
    assert (sd / "libs").is_dir() and (sd / "Singularity").read_text() == DEF.decode()
    assert os.readlink(root / "environment") == ".singularity.d/env/90-environment.sh"
    assert os.readlink(root / ".run") == ".singularity.d/actions/run"
    assert os.readlink(root / "apptainer") == ".singularity.d/runscript"
    assert (root / "etc" / "hosts").read_text() == ""  # apptainer binds the host's over it
    for d in ("dev", "proc", "sys", "tmp", "var/tmp", "home", "root"):
        assert (root / d).is_dir()
    raw = (sd / "labels.json").read_text()
    assert "\t" in raw and "\\u003c" in raw  # Go's MarshalIndent with a tab, HTML characters escaped
    labels = json.loads(raw)
    assert labels["a"] == "b<c>&"
    assert labels["org.label-schema.usage.singularity.deffile.bootstrap"] == "docker-daemon"
    assert labels["org.label-schema.usage.singularity.deffile.from"] == "acme/x:1"
    assert labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    assert labels["org.label-schema.build-date"] == "Tuesday_14_November_2023_22:13:20_UTC"
    assert meta["type"] == "container" and meta["data"]["attributes"]["deffile"] == DEF.decode()
    # the exec action sources the environment scripts in order, then runs the command
    r = subprocess.run(["sh", str(sd / "actions/exec"), "sh", "-c", 'echo "$PATH|$LD_LIBRARY_PATH"'],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    # the scripts use absolute /.singularity.d paths: outside a container they find nothing to source
    assert r.stdout.strip() == "/usr/bin:/bin|"


def test_times_and_dates() -> None:
    assert parse_created("2023-11-14T22:13:20.123456789Z") == 1_700_000_000
    assert parse_created("2023-11-15T00:13:20+02:00") == 1_700_000_000
    assert parse_created("") == 0
    assert build_date(0) == "Thursday_1_January_1970_0:0:0_UTC"


@needs_squashfs
def test_write_image_sif_from_a_rootfs(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hello").write_text("#!/bin/sh\necho hello\n")
    (root / "bin" / "hello").chmod(0o755)
    cfg = ImageConfig.from_json({"created": "2024-01-02T03:04:05Z", "architecture": "amd64",
                                 "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/hello"], "Labels": {"x": "y"}}})
    sif = write_image_sif(root, tmp_path / "out.sif", cfg, DEF.decode(), Runner(), image_id="sha256:abc",
                          processors=1)
    assert [d.type_name for d in sif.descriptors] == ["DEFFILE", "GENERIC_JSON", "GENERIC_JSON", "PARTITION"]
    assert [d.name for d in sif.descriptors[1:3]] == [INSPECT_METADATA, OCI_CONFIG]
    assert sif.json_object(OCI_CONFIG) == {"Cmd": ["/bin/hello"], "Env": ["PATH=/bin"], "Labels": {"x": "y"}}
    meta = sif.json_object(INSPECT_METADATA)
    assert meta["data"]["attributes"]["labels"]["x"] == "y"
    assert "'/bin/hello'" in meta["data"]["attributes"]["runscript"]
    part = sif.primary_partition()
    assert part is not None and sif.read(part, 4) == b"hsqs"
    assert sif.header.created == parse_created("2024-01-02T03:04:05Z")
    if shutil.which("unsquashfs"):
        listing = subprocess.run(["unsquashfs", "-o", str(part.offset), "-l", str(sif.path)],
                                 capture_output=True, text=True, check=True).stdout
        for p in ("squashfs-root/bin/hello", "squashfs-root/.singularity.d/runscript",
                  "squashfs-root/.singularity.d/env/10-docker2singularity.sh", "squashfs-root/environment"):
            assert p in listing.split(), p
    # the same rootfs and config give the same file, a second later too (the layout is stamped)
    time.sleep(1.1)
    again = write_image_sif(root, tmp_path / "again.sif", cfg, DEF.decode(), Runner(), image_id="sha256:abc",
                            processors=1)
    assert again.path.read_bytes() == sif.path.read_bytes()
