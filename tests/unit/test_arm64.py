"""arm64 images on any host: emulation checks, base tags per platform, --platform in the build
command and the dry run, where the torch wheel comes from, a bootstrapped root written as an arm64
image, and `kiln inspect` saying the platform of aarch64 ELF files and wheels.

No daemon here: tests/integration/test_build_arm64.py builds and runs an arm64 image for real.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from torchkiln.building.bootstrap import BaseRequest, default_tag
from torchkiln.building.emulation import base_for_platform, builds_here, emulation_problem, require_emulation
from torchkiln.building.execute import ensure_base
from torchkiln.building.invocation import engine_platform
from torchkiln.cli import main
from torchkiln.engines import DockerEngine, EngineInfo, PodmanEngine
from torchkiln.engines.engine import BuildRequest, ImageDetails
from torchkiln.errors import ExitCode, InputError, ToolMissingError
from torchkiln.images.rootfs import write_docker_archive
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.runner import Runner
from torchkiln.spec import Spec

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
FATBIN = ROOT / "tests" / "fixtures" / "fatbin"
DOCKER = DockerEngine(EngineInfo("docker", "/usr/bin/docker", "20.10.24", "20.10.24", "buildkit"), Runner())
PODMAN = PodmanEngine(EngineInfo("podman", "/usr/bin/podman", "4.3.1", "4.3.1", "buildah"), Runner())

QEMU_OK = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
"""


def _binfmt(tmp_path: Path, entry: str | None, *, mounted: bool = True) -> Path:
    d = tmp_path / "binfmt_misc"
    d.mkdir()
    if mounted:
        (d / "status").write_text("enabled\n")
    if entry is not None:
        (d / "qemu-aarch64").write_text(entry)
    return d


# -- emulation -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "mounted", "problem"),
    [
        (QEMU_OK, True, None),
        (None, False, "binfmt_misc is not mounted"),
        (None, True, "no qemu-aarch64 handler is registered"),
        (QEMU_OK.replace("enabled", "disabled", 1), True, "handler of binfmt_misc is disabled"),
        (QEMU_OK.replace("flags: PF", "flags: P"), True, "no F (fix binary) flag"),
    ],
)
def test_emulation_is_checked_in_binfmt_misc(tmp_path: Path, entry: str | None, mounted: bool,
                                             problem: str | None) -> None:
    binfmt = _binfmt(tmp_path, entry, mounted=mounted)
    found = emulation_problem("linux/arm64", binfmt, host="linux/amd64")
    assert (found is None) if problem is None else (problem in str(found))
    assert emulation_problem("linux/arm64", binfmt, host="linux/arm64") is None  # native: nothing to check


def test_missing_emulation_is_exit_11_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError) as e:
        require_emulation("linux/arm64", "`kiln base bootstrap`", _binfmt(tmp_path, None), host="linux/amd64")
    assert e.value.exit_code == ExitCode.TOOL_MISSING == 11
    assert "qemu-user-static binfmt-support" in e.value.hint and "update-binfmts --enable qemu-aarch64" in e.value.hint
    assert "aarch64 programs on this linux/amd64 machine" in e.value.message


def test_only_a_build_on_this_machine_needs_its_emulation() -> None:
    assert builds_here({}) and builds_here({"DOCKER_HOST": "unix:///var/run/docker.sock", "DOCKER_CONTEXT": "default"})
    for remote in ({"DOCKER_HOST": "tcp://arm-builder:2376"}, {"DOCKER_HOST": "ssh://grace"},
                   {"DOCKER_CONTEXT": "grace"}, {"BUILDX_BUILDER": "k8s"}, {"CONTAINER_HOST": "ssh://x"}):
        assert not builds_here(remote), remote


# -- base images per platform ------------------------------------------------------------------------
def test_bases_are_tagged_and_picked_per_platform() -> None:
    assert default_tag("bookworm", platform="linux/arm64") == "kiln-base:bookworm-arm64"
    assert BaseRequest(platform="linux/arm64").image == "kiln-base:bookworm-arm64"
    assert BaseRequest().image == "kiln-base:bookworm"
    extra = default_tag("bookworm", ("python3", "libgl1"), "linux/arm64")
    assert extra.startswith("kiln-base:bookworm-") and extra.endswith("-arm64")
    assert base_for_platform("kiln-base:bookworm", "linux/arm64") == "kiln-base:bookworm-arm64"
    assert base_for_platform("kiln-base:bookworm-arm64", "linux/arm64") == "kiln-base:bookworm-arm64"
    assert base_for_platform("kiln-base:bookworm", "linux/amd64") == "kiln-base:bookworm"
    # other images are the engine's to resolve for the platform (multi-platform tags)
    assert base_for_platform("python:3.11-slim-bookworm", "linux/arm64") == "python:3.11-slim-bookworm"
    assert base_for_platform("acme/kiln-base:bookworm", "linux/arm64") == "acme/kiln-base:bookworm"


def test_a_rootfs_becomes_an_arm64_docker_archive(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as t:
        data = b"#!/bin/sh\n"
        info = tarfile.TarInfo("bin/sh")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    out = write_docker_archive(rootfs, tmp_path / "image.tar", "kiln-base:bookworm-arm64", "linux/arm64",
                               env=("LANG=C.UTF-8",), cmd=("/bin/bash",), labels={"io.torchkiln.base.python": "3.11"})
    with tarfile.open(out) as t:
        manifest = json.load(t.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(t.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
        layer = t.extractfile(manifest[0]["Layers"][0]).read()  # type: ignore[union-attr]
    assert manifest[0]["RepoTags"] == ["kiln-base:bookworm-arm64"]
    assert (config["os"], config["architecture"], config["variant"]) == ("linux", "arm64", "v8")
    assert config["config"] == {"Env": ["LANG=C.UTF-8"], "Cmd": ["/bin/bash"],
                                "Labels": {"io.torchkiln.base.python": "3.11"}}
    assert layer == rootfs.read_bytes()
    import hashlib

    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]


@dataclass
class _Store:
    """An engine's store holding one image of a given architecture (what ensure_base asks)."""

    architecture: str
    info: EngineInfo = DOCKER.info

    def image_exists(self, image: str) -> bool:
        return True

    def pull(self, image: str, *, timeout: float | None = 120, platform: str | None = None) -> bool:
        raise AssertionError("the base exists: nothing to pull")

    def inspect_image(self, image: str) -> ImageDetails:
        return ImageDetails("sha256:b", 1, 1, "", (), {"io.torchkiln.base.python": "3.11"}, "", os="linux",
                            architecture=self.architecture)


def test_a_base_of_another_architecture_is_refused_before_the_build() -> None:
    with pytest.raises(InputError) as e:
        ensure_base(_Store("amd64"), "acme/base:1", "3.11", "image", "linux/arm64")  # type: ignore[arg-type]
    assert e.value.exit_code == ExitCode.INPUT
    assert "acme/base:1 is linux/amd64, but the plan builds a linux/arm64 image" in e.value.message
    assert "kiln base bootstrap --platform linux/arm64" in e.value.hint
    ensure_base(_Store("arm64"), "acme/base:1", "3.11", "image", "linux/arm64")  # type: ignore[arg-type]


# -- the build command -------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", [DOCKER, PODMAN], ids=["docker", "podman"])
def test_the_platform_is_spelled_in_the_build_command(engine: DockerEngine | PodmanEngine) -> None:
    request = BuildRequest(Path("/ctx"), Path("/ctx/Dockerfile"), Path("/t/iid"), platform="linux/arm64")
    argv = list(engine.build_command(request).argv)
    assert argv[argv.index("--platform") + 1] == "linux/arm64" and argv[-1] == "/ctx"
    bare = engine.build_command(BuildRequest(Path("/ctx"), Path("/ctx/Dockerfile"), Path("/t/iid"))).argv
    assert "--platform" not in bare


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_the_invocation_carries_the_platform_and_the_arm64_base(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """What `kiln build --dry-run --json` prints (planned with a known engine: no daemon to probe)."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    from torchkiln.building.execute import plan_spec
    from torchkiln.building.invocation import BuildOptions

    inv = plan_spec(EXAMPLES / "cpu-arm64.toml", DOCKER, BuildOptions(base="kiln-base:bookworm",
                                                                      context_dir=tmp_path / "ctx"), env={})
    d = inv.to_dict()
    assert d["platform"] == "linux/arm64" and d["base_image"] == "kiln-base:bookworm-arm64"
    assert d["command"][d["command"].index("--platform") + 1] == "linux/arm64"
    # --platform re-resolves a spec that names no platform: the CPU example, for Arm
    arm = plan_spec(EXAMPLES / "cpu.toml", DOCKER, BuildOptions(platform="linux/arm64", context_dir=tmp_path / "c2"),
                    env={})
    assert arm.platform == "linux/arm64" and "--platform" in arm.command.argv
    assert 'io.torchkiln.platform="linux/arm64"' in arm.files.texts["Dockerfile"]
    amd = plan_spec(EXAMPLES / "cpu.toml", DOCKER, BuildOptions(context_dir=tmp_path / "c3"), env={})
    assert amd.platform == "linux/amd64" and amd.to_dict()["platform"] == "linux/amd64"


def test_the_engine_is_told_the_platform_unless_it_is_certainly_its_own() -> None:
    assert engine_platform("linux/amd64", None, host="linux/amd64") is None  # the command stays as it was
    assert engine_platform("linux/amd64", "linux/amd64", host="linux/amd64") == "linux/amd64"  # asked for
    assert engine_platform("linux/amd64", None, host="linux/arm64") == "linux/amd64"  # an Arm host
    assert engine_platform("linux/arm64", None, host="linux/amd64") == "linux/arm64"
    assert engine_platform("linux/arm64", None, host="linux/arm64") == "linux/arm64"


def test_build_help_describes_platform(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(capsys, "build", "--help")
    assert code == 0 and "--platform" in out and "linux/arm64" in out
    code, out = _cli(capsys, "base", "bootstrap", "--help")
    assert code == 0 and "--platform" in out


# -- where the torch wheel comes from -----------------------------------------------------------------
def _plan(**tables: object):  # type: ignore[no-untyped-def]
    return resolve(Spec.model_validate({"image": {"name": "t"}, **tables}), load_knowledge())


def _source(plan) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    d = next(d for d in plan.decisions if d.topic == "wheel source")
    return d.choice, d.why


def test_arm64_cpu_torch_comes_from_where_it_really_is() -> None:
    old = _plan(image={"name": "t", "platform": "linux/arm64"}, torch={"version": "2.10.0", "cuda": "cpu"})
    assert old.torch.requirement == "torch==2.10.0" and old.torch.on_default_index
    choice, why = _source(old)
    assert choice == "the default package index (PyPI)" and "aarch64 torch 2.10.0 wheel is a CPU build" in why
    new = _plan(image={"name": "t", "platform": "linux/arm64"}, torch={"version": "2.13.0", "cuda": "cpu"})
    assert new.torch.requirement == "torch==2.13.0+cpu" and not new.torch.on_default_index
    choice, why = _source(new)
    assert choice == "PyTorch's cpu index"
    assert "aarch64 torch 2.13.0 is the cu130 build" in why and "pin 2.10.0" in why and "torch_index" in why
    x86 = _plan(torch={"version": "2.13.0", "cuda": "cpu"})
    assert _source(x86)[0] == "PyTorch's cpu index" and "aarch64" not in _source(x86)[1]
    gpu = _plan(torch={"version": "2.14.1"}, gpu={"targets": ["GH200"]})
    assert _source(gpu)[0] == "the default package index (PyPI)" and "cu130 build" in _source(gpu)[1]


def test_explain_says_where_the_wheel_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(capsys, "explain", str(EXAMPLES / "cpu-arm64.toml"), "--json")
    assert code == 0
    decisions = {d["topic"]: d for d in json.loads(out)["decisions"]}
    assert decisions["platform"]["choice"] == "linux/arm64"
    assert decisions["wheel source"]["choice"] == "the default package index (PyPI)"


# -- kiln inspect on aarch64 ELF files and wheels -----------------------------------------------------
def _as_aarch64(src: Path, dest: Path) -> Path:
    """``src`` with its ELF header's e_machine set to AArch64 (183): the fat binaries it carries are the
    same format on both CPUs, so this is what an aarch64 build of the same CUDA code holds."""
    data = bytearray(src.read_bytes())
    assert data[:4] == b"\x7fELF" and data[5] == 1  # little-endian
    data[18:20] = (183).to_bytes(2, "little")
    dest.write_bytes(bytes(data))
    return dest


def _wheel(dest: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(dest, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return dest


def test_inspect_reports_an_aarch64_shared_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    so = _as_aarch64(FATBIN / "multi.so", tmp_path / "libsaxpy.so")
    code, out = _cli(capsys, "inspect", str(so), "--json")
    report = json.loads(out)
    assert code == 0 and report["kind"] == "binary"
    assert report["platform"] == "linux/arm64" and report["machines"] == ["aarch64"]
    assert report["binaries"][0]["machine"] == "aarch64"
    assert report["binaries"][0]["archs"] == ["sm_75", "sm_80", "sm_90", "sm_90a", "compute_90"]
    code, out = _cli(capsys, "inspect", str(so))
    assert code == 0 and "linux/arm64" in out
    x86 = json.loads(_cli(capsys, "inspect", str(FATBIN / "multi.so"), "--json")[1])
    assert x86["platform"] == "linux/amd64" and x86["machines"] == ["x86_64"]


def test_inspect_reports_an_aarch64_wheel(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    so = _as_aarch64(FATBIN / "multi.so", tmp_path / "libsaxpy.so").read_bytes()
    wheel = _wheel(tmp_path / "saxpy-1.0-cp311-cp311-manylinux_2_28_aarch64.whl",
                   {"saxpy/libsaxpy.so": so, "saxpy/__init__.py": b"", "saxpy-1.0.dist-info/WHEEL": b"Tag: x\n"})
    code, out = _cli(capsys, "inspect", str(wheel), "--json")
    report = json.loads(out)
    assert code == 0 and report["kind"] == "wheel"
    assert report["platform"] == "linux/arm64" and report["machines"] == ["aarch64"] and report["notes"] == []
    code, out = _cli(capsys, "inspect", str(wheel))
    assert "wheel  linux/arm64" in out and "(aarch64)" in out
    # a wheel whose tag says aarch64 but whose code is x86_64 is called out
    wrong = _wheel(tmp_path / "saxpy-1.0-cp311-cp311-manylinux_2_28_aarch64.whl",
                   {"saxpy/libsaxpy.so": (FATBIN / "multi.so").read_bytes()})
    report = json.loads(_cli(capsys, "inspect", str(wrong), "--json")[1])
    assert report["platform"] == "linux/arm64" and report["machines"] == ["x86_64"]
    assert any("tagged linux/arm64, but holds ELF files for x86_64" in n for n in report["notes"])
    pure = _wheel(tmp_path / "six-1.16.0-py2.py3-none-any.whl", {"six.py": b""})
    assert json.loads(_cli(capsys, "inspect", str(pure), "--json")[1])["platform"] is None


# -- the uv of an arm64 build context -----------------------------------------------------------------
def _fake_uv_wheel(folder: Path, version: str) -> Path:
    """A wheel of uv for aarch64 whose "binary" is a marker file (installing it runs nothing)."""
    name = f"uv-{version}"
    wheel = folder / f"{name}-py3-none-manylinux_2_28_aarch64.whl"
    files = {
        f"{name}.data/scripts/uv": b"aarch64 uv\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode(),
        f"{name}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                                   b"Tag: py3-none-manylinux_2_28_aarch64\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{name}.dist-info/RECORD,,\n"
    return _wheel(wheel, {**files, f"{name}.dist-info/RECORD": record.encode()})


def test_an_arm64_context_gets_uv_built_for_aarch64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchkiln.building.context import fetch_uv, uv_binary, uv_version
    from torchkiln.building.sources import Sources
    from torchkiln.errors import SourceError

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    empty = tmp_path / "simple"
    empty.mkdir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dest = uv_binary("linux/arm64")
    assert dest.is_relative_to(tmp_path / "cache") and dest.parent.parent.name == f"{uv_version()}-aarch64"
    # sources without uv's aarch64 wheel: exit 9, naming what is missing
    with pytest.raises(SourceError) as e:
        fetch_uv("linux/arm64", Sources(index_url=str(empty), find_links=(str(wheels),)), Runner())
    assert e.value.exit_code == ExitCode.SOURCE and f"uv=={uv_version()}" in e.value.hint
    assert not dest.exists() and not any((tmp_path / "cache" / "uv").iterdir())  # nothing half-written
    _fake_uv_wheel(wheels, uv_version())
    got = fetch_uv("linux/arm64", Sources(index_url=str(empty), find_links=(str(wheels),)), Runner())
    assert got == dest and dest.read_bytes() == b"aarch64 uv\n"
    assert fetch_uv("linux/arm64", Sources(), Runner()) == dest  # cached: no source asked again
