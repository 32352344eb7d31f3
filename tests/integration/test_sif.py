"""A .sif written by ``kiln export --format sif``: siftool lists it, and its partition runs torch in a chroot.

The image: the torch root made by tests/integration/test_apptainer_post.py (a debootstrapped
bookworm after the rendered %post), imported into Docker with the config a kiln image has (PATH with
the venv, WORKDIR, CMD). ``kiln export`` then saves it with the engine, flattens the layers, adds
apptainer's /.singularity.d layout and writes the SIF. Without a usable Docker the SIF is written
from that root directly (the same writer, without the engine steps). The squashfs of the torch root
is made once per session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from test_apptainer_post import bookworm_rootfs, chroot, post_rootfs  # noqa: F401  (session fixtures)

from torchkiln.errors import KilnError
from torchkiln.images.sif import ImageConfig, read_sif, write_image_sif
from torchkiln.runner import Runner

IMAGE = "kiln-test/sif-cpu:latest"
ENV = ["PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "VIRTUAL_ENV=/opt/venv",
       "LANG=C.UTF-8"]
CMD = ["python", "apps/cpu_app.py"]

pytestmark = pytest.mark.slow


def _tools() -> None:
    for tool in ("siftool", "unsquashfs", "mksquashfs"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install siftool squashfs-tools)")


def _docker():  # type: ignore[no-untyped-def]
    try:
        from torchkiln.engines import get_engine

        return get_engine("docker", Runner())
    except KilnError:
        return None


@pytest.fixture(scope="session")
def exported_sif(post_rootfs: tuple[Path, Path, str],  # noqa: F811 (the fixture imported above)
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the .sif, how it was made: "kiln export" through docker, or "rootfs" without an engine)."""
    _tools()
    root = post_rootfs[0]
    out = tmp_path_factory.mktemp("sif") / "cpu.sif"
    engine = _docker()
    if engine is None:
        cfg = ImageConfig(env=tuple(ENV), cmd=tuple(CMD), workdir="/workspace", labels={"io.torchkiln.test": "1"},
                          raw={"Env": ENV, "Cmd": CMD, "WorkingDir": "/workspace"})
        work = tmp_path_factory.mktemp("sif-rootfs") / "rootfs"
        subprocess.run(["cp", "-a", str(root), str(work)], check=True)
        write_image_sif(work, out, cfg, f"Bootstrap: docker-daemon\nFrom: {IMAGE}\n", Runner(), processors=2)
        return out, "rootfs"
    tarball = out.with_suffix(".rootfs.tar")
    with tarfile.open(tarball, "w") as tf:  # numeric owners kept; the root dir entry as "."
        tf.add(root, arcname=".")
    changes = [f"ENV {e}" for e in ENV] + ["WORKDIR /workspace", f"CMD {json.dumps(CMD)}",
                                            'LABEL io.torchkiln.test="1"']
    engine.import_tar(tarball, IMAGE, changes=changes)
    tarball.unlink()
    from torchkiln.cli import main

    try:
        rc = main(["export", IMAGE, "--format", "sif", "-o", str(out), "--engine", "docker", "--processors", "2",
                   "--json"])
    finally:
        engine.remove_image(IMAGE)
    assert rc == 0
    return out, "kiln export"


def _siftool(*args: str) -> str:
    return subprocess.run(["siftool", *args], capture_output=True, text=True, check=True).stdout


def test_siftool_lists_header_primary_squashfs_partition_and_deffile(exported_sif: tuple[Path, str]) -> None:
    sif, how = exported_sif
    rows = [ln.split("|") for ln in _siftool("list", str(sif)).splitlines() if ln[:1].isdigit()]
    assert [r[-1].strip() for r in rows] == ["Def.FILE", "JSON.Generic", "JSON.Generic",
                                             "FS (Squashfs/*System/amd64)"], how
    header = _siftool("header", str(sif))
    assert "Primary Architecture: amd64" in header and "Version:              01" in header
    assert _siftool("dump", "1", str(sif)) == f"Bootstrap: docker-daemon\nFrom: {IMAGE}\n"
    info = _siftool("info", "2", str(sif))
    assert "inspect-metadata.json" in info
    meta = json.loads(subprocess.run(["siftool", "dump", "2", str(sif)], capture_output=True, check=True).stdout)
    labels = meta["data"]["attributes"]["labels"]
    assert labels["io.torchkiln.test"] == "1" and labels["org.label-schema.build-arch"] == "amd64"
    with sif.open("rb") as f:
        assert f.read(31) == b"#!/usr/bin/env run-singularity\n"


def test_partition_unsquashed_and_entered_with_chroot_runs_the_runscript_and_imports_torch(
    exported_sif: tuple[Path, str], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (chroot)")
    sif, _how = exported_sif
    part = read_sif(sif).primary_partition()
    assert part is not None
    root = tmp_path / "sq"
    subprocess.run(["unsquashfs", "-o", str(part.offset), "-d", str(root), "-no-progress", str(sif)],
                   check=True, capture_output=True)
    assert (root / ".singularity.d/env/10-docker2singularity.sh").is_file()
    # apptainer run: actions/run sources every env script, then the runscript (CMD in WORKDIR)
    r = chroot(root, "/.singularity.d/actions/run", env={"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "torch 2.13.0+cpu (CUDA None) - sum of 0..11 = 66"
    # apptainer exec: the image's PATH (the venv first) from 10-docker2singularity.sh
    r = chroot(root, "/.singularity.d/actions/exec", "python", "-c", "import torch, sys; print(torch.__version__, "
               "sys.prefix)", env={"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert (r.returncode, r.stdout.split()) == (0, ["2.13.0+cpu", "/opt/venv"]), r.stderr
    # the runscript with arguments runs them instead of CMD
    r = chroot(root, "/.singularity.d/actions/run", "python", "-c", "print('args')",
               env={"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert (r.returncode, r.stdout.strip()) == (0, "args"), r.stderr
