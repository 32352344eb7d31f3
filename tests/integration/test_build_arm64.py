"""An arm64 image built for real on this (x86_64) machine, under qemu-user-static.

``kiln base bootstrap --platform linux/arm64`` makes the offline arm64 base (debootstrap's second
stage under emulation, once, then found by its tag ``kiln-base:bookworm-arm64``); ``examples/cpu-arm64.toml``
is built on it with ``--base kiln-base:bookworm`` (kiln takes the arm64 sibling for an arm64 plan),
torch is imported in the image (``platform.machine()`` says aarch64) and ``kiln inspect`` reports the
image's platform.

Which torch: 2.10.0, the newest release whose aarch64 wheel on PyPI is a CPU build (~140 MB; 2.11 and
newer are the CUDA 13 build, ~400 MB plus about 2 GB of nvidia-* wheels, far too slow to install
under emulation in CI). Its wheels (and numpy's, six's, torch's dependencies') are fetched once for
linux/aarch64 with ``pip download`` through the configured sources (the ``mirror`` fixture: KILN_*
variables or pip's configuration, never a host name written here) into a stable folder, which the
build then reads as a local PEP 503 index: the emulated build itself needs no network. The index also
holds uv's aarch64 wheel, from which kiln takes the uv of an arm64 build context. The test is
skipped, with the reason, where the sources have no such wheels or the host cannot run aarch64
programs (binfmt_misc without a qemu-aarch64 handler).
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename

from torchkiln.building.bootstrap import BaseRequest, bootstrap
from torchkiln.building.context import uv_version
from torchkiln.building.emulation import emulation_problem
from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.building.sources import SourceLayer
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SPEC = "cpu-arm64.toml"
#: what the example installs, for linux/aarch64 and CPython 3.11 (its [torch] and [packages]), and the
#: uv that kiln puts into an arm64 build context (the host's release, built for aarch64)
REQUIREMENTS = ("torch==2.10.0", "numpy==2.3.5", "six==1.16.0", f"uv=={uv_version()}")
WHEELS = Path(tempfile.gettempdir()) / "kiln-test-wheels-aarch64"


@pytest.fixture(scope="session")
def arm64_base(docker_engine: Engine) -> str:
    """``kiln-base:bookworm-arm64`` in docker (bootstrapped under emulation once, then found by tag)."""
    problem = emulation_problem("linux/arm64")
    if problem is not None:
        pytest.skip(f"this host cannot run aarch64 programs: {problem} (scripts/quickstart.sh sets it up)")
    request = BaseRequest(platform="linux/arm64")
    if not docker_engine.image_exists(request.image):
        if shutil.which("debootstrap") is None:
            pytest.skip("debootstrap is not installed (needed for the offline arm64 base image)")
        if os.geteuid() != 0:
            pytest.skip("bootstrapping the offline arm64 base needs root")
    return bootstrap(docker_engine, request).image


def _pip_sources(layer: SourceLayer, *, cert: bool = True) -> list[str]:
    """The layer as pip/uv options (uv takes the CA bundle from SSL_CERT_FILE instead of --cert)."""
    args: list[str] = []
    if layer.index_url:
        args += ["--index-url", layer.index_url]
    for url in layer.extra_index_urls:
        args += ["--extra-index-url", url]
    for loc in layer.find_links:
        args += ["--find-links", loc]
    if layer.ca_bundle and cert:
        args += ["--cert", layer.ca_bundle]
    return args


def _write_index(files: Path, simple: Path) -> None:
    """A PEP 503 index of the wheels in ``files`` (``simple/<project>/index.html`` → ``../../files/x.whl``)."""
    projects: dict[str, list[str]] = {}
    for wheel in sorted(files.glob("*.whl")):
        projects.setdefault(canonicalize_name(parse_wheel_filename(wheel.name)[0]), []).append(wheel.name)
    for project, names in projects.items():
        page = simple / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{html.escape(n)}">{html.escape(n)}</a>\n' for n in names)
        page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


def _fetch(layer: SourceLayer, files: Path) -> str | None:
    """Download the example's linux/aarch64 wheels into ``files``; None, or why it failed.

    uv resolves for the target platform (pip evaluates dependency markers for the host, and would ask
    for torch's x86_64-only nvidia-* wheels); pip downloads the pinned set, both from ``layer``.
    """
    from uv import find_uv_bin

    target = ["--python-version", "3.11"]
    uv_sources = _pip_sources(layer, cert=False)
    env = {**os.environ, **({"SSL_CERT_FILE": layer.ca_bundle} if layer.ca_bundle else {})}
    pinned = subprocess.run(
        [find_uv_bin(), "pip", "compile", "-", "--python-platform", "aarch64-manylinux_2_28", *target,
         "--only-binary", ":all:", "--no-header", "--no-annotate", "--index-strategy", "unsafe-best-match",
         *uv_sources],
        input="\n".join(REQUIREMENTS) + "\n", capture_output=True, text=True, timeout=300, env=env,
    )
    if pinned.returncode != 0:
        return " ".join(pinned.stderr.strip().splitlines()[-2:])
    reqs = [ln for ln in pinned.stdout.splitlines() if ln and not ln.startswith(("#", " "))]
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(files),
         "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux_2_17_aarch64",
         "--platform", "manylinux2014_aarch64", "--platform", "any", *target, "--implementation", "cp",
         "--abi", "cp311", "--abi", "abi3", "--abi", "none", *_pip_sources(layer), *reqs],
        capture_output=True, text=True, timeout=900,
    )
    return None if r.returncode == 0 else " ".join((r.stderr or r.stdout).strip().splitlines()[-2:])


@pytest.fixture(scope="session")
def arm64_index(mirror) -> Path:  # type: ignore[no-untyped-def]
    """A local index of the example's linux/aarch64 wheels, downloaded once through the configured sources."""
    simple, files = WHEELS / "simple", WHEELS / "files"
    if not (WHEELS / "complete").exists():
        shutil.rmtree(WHEELS, ignore_errors=True)
        files.mkdir(parents=True)
        why = _fetch(mirror.layer, files)
        if why is not None:
            shutil.rmtree(WHEELS, ignore_errors=True)
            pytest.skip(f"the configured package sources have no linux/aarch64 wheels of {', '.join(REQUIREMENTS)} "
                        f"and their dependencies: {why}")
        _write_index(files, simple)
        (WHEELS / "complete").touch()
    return simple


def test_arm64_cpu_image_builds_and_runs_under_emulation(
    docker_engine: Engine, arm64_base: str, arm64_index: Path, example_copy, stable_context, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = example_copy(tmp_path / "spec", SPEC)
    options = BuildOptions(
        base="kiln-base:bookworm",  # the amd64 tag: an arm64 plan builds on its -arm64 sibling
        tag=f"kiln-test/arm64-cpu:session-{os.getpid()}",
        context_dir=stable_context("cpu-arm64"),
        flags=SourceLayer("test", index_url=str(arm64_index)),
    )
    summary = build_image(spec, docker_engine, options, env={})
    try:
        assert summary.base_image == arm64_base == "kiln-base:bookworm-arm64"
        details = docker_engine.inspect_image(summary.image)
        assert (details.os, details.architecture) == ("linux", "arm64")
        assert details.labels["io.torchkiln.platform"] == "linux/arm64"

        # one emulated run (importing torch under qemu takes a minute or more on two busy cores)
        r = docker_engine.run(
            summary.image,
            ["python", "-c",
             "import torch, platform; print(platform.machine(), torch.__version__, torch.version.cuda)"],
            check=False,
        )
        assert r.returncode == 0, r.output
        machine, version, cuda = r.stdout.split()[-3:]
        # PyPI's aarch64 CPU wheel is torch-2.10.0-…whl, and says 2.10.0+cpu of itself
        assert machine == "aarch64" and version.split("+")[0] == "2.10.0" and cuda == "None", r.stdout

        from torchkiln.cli import main

        code = main(["inspect", summary.image, "--engine", "docker", "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0
        assert report["platform"] == "linux/arm64"
        assert report["image"]["architecture"] == "arm64" and report["image"]["os"] == "linux"
        print(f"\narm64 build: {summary.seconds:.0f} s ({summary.build_seconds:.0f} s in the engine), "
              f"{summary.size_bytes / 1e6:.0f} MB, {summary.cache_hits} cached / {summary.cache_misses} run",
              file=sys.stderr)
    finally:
        docker_engine.remove_image(summary.image)
