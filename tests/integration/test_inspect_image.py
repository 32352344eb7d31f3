"""`kiln inspect` on a real image built with docker (BuildKit) with planted waste.

The image is built FROM a tiny busybox base made offline-friendly: Debian's busybox-static package
(``apt-get download``) imported with ``docker import`` and cached by name, so it is made once per
machine. Planted: a pip cache, an apt list, a file deleted by a later layer, a file overwritten by
a later layer, and a CUDA library (tests/fixtures/fatbin/multi.so). The report must find each with
its exact byte count. Skipped cleanly when docker (or the busybox package) is not usable.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from torchkiln.arch import Capability
from torchkiln.inspect.analyze import inspect_path
from torchkiln.inspect.coverage import Target

pytestmark = pytest.mark.engine

DOCKER = os.environ.get("KILN_TEST_DOCKER", "/usr/bin/docker")  # Debian's client: BuildKit without buildx
BASE = "kiln-test-busybox:1"
IMAGE = "kiln-test-inspect-waste:1"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"
APPLETS = ("sh", "head", "rm", "mkdir", "cat", "ls", "true", "echo", "dd", "touch", "chmod", "ln", "cp", "mv")
TARGETS = (Target("H100", Capability(9, 0)), Target("B200", Capability(10, 0)), Target("T4", Capability(7, 5)))

DOCKERFILE = """\
FROM kiln-test-busybox:1
RUN mkdir -p /root/.cache/pip/http/1/2 /var/lib/apt/lists \\
 && head -c 300000 /dev/zero > /root/.cache/pip/http/1/2/planted-wheel \\
 && head -c 123457 /dev/zero > /var/lib/apt/lists/planted_Packages \\
 && head -c 5000 /dev/zero > /etc/overwritten
RUN head -c 1048576 /dev/zero > /big.bin
RUN rm /big.bin && head -c 10 /dev/zero > /etc/overwritten
COPY libk.so /opt/app/lib/libk.so
"""


def _run(*args: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, **kw)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def docker() -> str:
    if not Path(DOCKER).exists():
        pytest.skip(f"{DOCKER} is not installed")
    info = _run(DOCKER, "info", "--format", "{{.ServerVersion}}", check=False)
    if info.returncode != 0:
        pytest.skip(f"docker daemon not usable: {info.stderr.strip()[:200]}")
    return DOCKER


def _busybox_binary(workdir: Path) -> Path:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs apt-get and dpkg-deb to fetch Debian's busybox-static for the base image")
    got = _run("apt-get", "download", "busybox-static", check=False, cwd=workdir, timeout=120)
    debs = list(workdir.glob("busybox-static_*.deb"))
    if got.returncode != 0 or not debs:
        pytest.skip(f"cannot download busybox-static: {got.stderr.strip()[:200]}")
    _run("dpkg-deb", "-x", str(debs[0]), str(workdir / "root"))
    binary = workdir / "root" / "bin" / "busybox"
    if not binary.exists():
        pytest.skip("busybox-static package has no bin/busybox")
    return binary


@pytest.fixture(scope="module")
def base(docker: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    if _run(docker, "image", "inspect", BASE, check=False).returncode == 0:
        return BASE
    work = tmp_path_factory.mktemp("busybox")
    binary = _busybox_binary(work)
    rootfs = work / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        for d in ("bin", "etc", "root", "tmp", "var", "dev", "proc", "sys"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
        tar.add(binary, "bin/busybox")
        for applet in APPLETS:
            ti = tarfile.TarInfo(f"bin/{applet}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(ti)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        ti = tarfile.TarInfo("etc/passwd")
        ti.size = len(passwd)
        tar.addfile(ti, io.BytesIO(passwd))
    _run(docker, "import", "--change", "ENV PATH=/bin", str(rootfs), BASE)
    return BASE


@pytest.fixture(scope="module")
def image(docker: str, base: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    ctx = tmp_path_factory.mktemp("ctx")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    shutil.copy(FIXTURES / "multi.so", ctx / "libk.so")
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    built = _run(docker, "build", "-t", IMAGE, str(ctx), check=False, env=env, timeout=300)
    if built.returncode != 0:
        pytest.fail(f"docker build failed:\n{built.stderr[-3000:]}")
    return IMAGE


@pytest.fixture(scope="module")
def archive(docker: str, image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("save") / "image.tar"
    _run(docker, "save", "-o", str(dest), image)
    return dest


def _check(report: dict[str, object]) -> None:
    waste = report["waste"]
    assert isinstance(waste, dict)
    cats = {c["category"]: c for c in waste["categories"]}
    layers = report["image"]["layers"]  # type: ignore[index]
    assert len(layers) == 5  # base + 3 RUN + COPY
    assert layers[2]["created_by"] == "RUN /bin/sh -c head -c 1048576 /dev/zero > /big.bin"
    assert layers[4]["created_by"] == "COPY libk.so /opt/app/lib/libk.so"
    assert report["packages"] == [  # no package metadata claims the copied library
        {
            "package": None,
            "version": None,
            "binaries": 1,
            "entries": 9,
            "archs": ["sm_75", "sm_80", "sm_90", "sm_90a", "compute_90"],
            "targets": {k: {"binaries_ok": 1, "failing": []} for k in ("9.0", "10.0", "7.5")},
        }
    ]

    deleted = {i["path"]: i for i in cats["deleted"]["items"]}
    assert deleted["/big.bin"] == {"path": "/big.bin", "bytes": 1048576, "files": 1, "layer": 2, "removed_in": 3}
    assert cats["overwritten"]["items"] == [
        {"path": "/etc/overwritten", "bytes": 5000, "files": 1, "layer": 1, "removed_in": 3}
    ]
    assert cats["pip-cache"]["items"] == [
        {"path": "/root/.cache/pip", "bytes": 300000, "files": 1, "layer": 1, "removed_in": None}
    ]
    assert cats["apt-lists"]["items"] == [
        {"path": "/var/lib/apt/lists/planted_Packages", "bytes": 123457, "files": 1, "layer": 1, "removed_in": None}
    ]
    assert layers[1]["wasted"] == 300000 + 123457 + 5000 and layers[2]["wasted"] == 1048576

    (binary,) = report["binaries"]  # type: ignore[misc]
    assert binary["path"] == "/opt/app/lib/libk.so" and binary["layer"] == 4
    assert [e["arch"] for e in binary["entries"]] == [
        "sm_75", "sm_80", "sm_90", "sm_90a", "sm_75", "sm_80", "compute_90", "sm_90", "sm_90a",
    ]  # fmt: skip
    assert binary["coverage"] == {
        "9.0": {"runs": True, "entry": "sm_90a", "how": "sass", "embedded": False},
        "10.0": {"runs": True, "entry": "compute_90", "how": "ptx-jit", "embedded": False},
        "7.5": {"runs": True, "entry": "sm_75", "how": "sass", "embedded": False},
    }


def test_planted_waste_in_a_saved_archive(archive: Path) -> None:
    report = inspect_path(archive, TARGETS)
    assert report.image is not None and IMAGE in report.image.tags
    _check(report.to_dict())


def test_image_name_through_the_engine_layer(image: str, capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    code = main(["inspect", image, "--engine", "docker", "-t", "H100,B200,T4", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["source"] == image
    _check(report)


def test_missing_image_is_a_clear_error(docker: str, capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    code = main(["inspect", "kiln-test-no-such-image:0", "--engine", "docker"])
    _out, err = capsys.readouterr()
    assert code == 7 and "no image 'kiln-test-no-such-image:0'" in err and "Traceback" not in err
