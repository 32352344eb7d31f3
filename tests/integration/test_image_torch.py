"""``[torch] source = "image"`` for real: an NGC-like stand-in base with the CPU torch 2.13.0 wheel set.

The stand-in (tests/standin.py) holds torch in the system Python's dist-packages, an
``/etc/pip/constraint.txt`` pinning torch and numpy, and NGC's environment names. The tests show that
* kiln reads its facts without running it (in place from docker's storage, and from its ``save`` on
  a pipe: the same facts), and they match what ``python -c "import torch"`` says in the image;
* a spec with a package on top builds, the package is installed at the version the image's
  constraints pin, and torch's files are byte-identical before and after;
* a package whose dependencies want another torch is refused, naming the package and the torch it
  wanted, instead of replacing the image's torch.

Needs docker, the offline base and a mirror with torch 2.13.0+cpu; about 2 minutes cold on 2 cores.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from standin import build_standin
from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine
from torchkiln.errors import BuildError
from torchkiln.images.facts import read_image_facts

pytestmark = [pytest.mark.engine, pytest.mark.slow]

TORCH = "2.13.0+cpu"
SITE = "/usr/local/lib/python3.11/dist-packages"
STANDIN = "kiln-test/ngc-standin:cpu-2.13.0"


@pytest.fixture(scope="module")
def standin(docker_engine: Engine, offline_base: str, mirror: Any, stable_context: Any) -> str:
    if not mirror.has("torch", TORCH):
        pytest.skip(f"the configured mirror has no torch {TORCH} wheel")
    try:
        return build_standin(docker_engine, offline_base, STANDIN, stable_context("ngc-standin"),
                             f"torch=={TORCH}", extra=["numpy"])
    except LookupError as e:
        pytest.skip(f"pip cannot download the stand-in's wheels: {e}")


def _py(engine: Engine, image: str, code: str) -> str:
    r = engine.run(image, ["python3", "-c", code], check=False)
    assert r.returncode == 0, r.output
    return r.stdout.strip().splitlines()[-1]


def test_facts_match_what_python_says_in_the_image(docker_engine: Engine, standin: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    direct = read_image_facts(standin, docker_engine)
    said = _py(docker_engine, standin, "import sys, torch, os; print(torch.__version__, torch.version.cuda, "
               "'%d.%d' % sys.version_info[:2], os.path.dirname(os.path.dirname(torch.__file__)), "
               "os.path.realpath(sys.executable))")
    version, cuda, python, site, exe = said.split()
    assert (direct.torch_version, str(direct.torch_cuda), direct.python, direct.site) == (version, cuda, python, site)
    assert direct.python_exe == exe == "/usr/bin/python3.11"
    assert direct.constraints_path == "/etc/pip/constraint.txt" and direct.constraints_torch == f"torch=={TORCH}"
    assert direct.ngc_release == "25.12" and dict(direct.env)["PIP_CONSTRAINT"] == "/etc/pip/constraint.txt"
    assert direct.arch_entries == () and direct.cuda_home == ""  # a CPU torch, no nvcc
    assert direct.read == "direct" or direct.read_note  # in place where docker's storage is readable
    assert direct.bytes_read < direct.image_size / 100  # a few small files, not the image
    exported = read_image_facts(standin, docker_engine, use_cache=False, read="export")
    assert exported.read == "export"
    keep = ("read", "read_note", "bytes_read", "seconds", "image_size")
    assert replace(exported, **{k: getattr(direct, k) for k in keep}) == direct
    cached = read_image_facts(standin, docker_engine)  # the second time from the cache, by image id
    assert cached == direct


def _digest(engine: Engine, image: str) -> str:
    return _py(engine, image, "import hashlib, torch, os; d = os.path.dirname(torch.__file__); "
               "print(hashlib.sha256(b''.join(open(os.path.join(d, f), 'rb').read() "
               "for f in ('__init__.py', 'version.py', 'lib/libtorch_cpu.so'))).hexdigest())")


def _spec(folder: Path, pip: list[str], extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "kiln.toml"
    spec.write_text(
        '[image]\nname = "kiln-test/on-standin"\ntag = "test"\n\n'
        f'[base]\nimage = "{STANDIN}"\n\n[torch]\nsource = "image"\n\n'
        f"[packages]\npip = {pip!r}\n{extra}".replace("'", '"'))
    return spec


def test_packages_on_top_keep_the_images_torch(docker_engine: Engine, standin: str, mirror: Any, tmp_path: Path,
                                               stable_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    spec = _spec(tmp_path / "spec", ["numpy"])
    tag = f"kiln-test/on-standin:{os.getpid()}"
    options = BuildOptions(tag=tag, context_dir=stable_context("on-standin"), flags=mirror.layer)
    summary = build_image(spec, docker_engine, options, env={})
    try:
        assert _digest(docker_engine, tag) == _digest(docker_engine, standin)
        assert _py(docker_engine, tag, "import torch; print(torch.__version__)") == TORCH
        pinned = _py(docker_engine, standin, "print([l for l in open('/etc/pip/constraint.txt') "
                     "if l.startswith('numpy==')][0].strip())")
        assert _py(docker_engine, tag, "import numpy; print('numpy==' + numpy.__version__)") == pinned
        assert _py(docker_engine, standin, "import importlib.util as u; print(u.find_spec('numpy'))") == "None"
        details = docker_engine.inspect_image(tag)
        assert details.labels["io.torchkiln.torch-source"] == "image"
        assert details.labels["io.torchkiln.torch"] == TORCH and details.labels["io.torchkiln.ngc"] == "25.12"
        assert "PIP_CONSTRAINT=/etc/pip/constraint.txt" in details.env  # the image's own, kept
        assert summary.image == tag
    finally:
        docker_engine.remove_image(tag)


def test_a_rebuild_on_the_vendor_image_gives_the_same_layers_below_the_app(
        docker_engine: Engine, standin: str, mirror: Any, tmp_path: Path, stable_context: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The package step and the user step on a vendor (NGC) image are stamped from a mark
    (render/reproducible.py): built twice, the second time with nothing reused, every layer but the
    WORKDIR and the app's COPY has the same digest, and the image's own torch is untouched."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    spec = _spec(tmp_path / "spec", ["six"])
    tags = [f"kiln-test/on-standin-repro:{os.getpid()}-{i}" for i in (1, 2)]
    try:
        for i, tag in enumerate(tags):
            options = BuildOptions(tag=tag, context_dir=stable_context("on-standin-repro"), flags=mirror.layer,
                                   no_cache=i == 1)
            summary = build_image(spec, docker_engine, options, env={})
        assert summary.cache_hits == 0  # the second build made every layer again
        a, b = (docker_engine.inspect_image(t).diff_ids for t in tags)
        base = len(docker_engine.inspect_image(standin).diff_ids)
        assert len(a) == len(b) >= base + 4  # the ADD, packages, user, WORKDIR, app
        assert a[:-2] == b[:-2]
        assert _digest(docker_engine, tags[1]) == _digest(docker_engine, standin)
    finally:
        for tag in tags:
            docker_engine.remove_image(tag)


def _wheel(folder: Path, name: str, requires: str) -> Path:
    """A minimal pure-Python wheel whose metadata requires ``requires``."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-1.0"
    files = {
        f"{name.replace('-', '_')}/__init__.py": b"",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                      f"Requires-Dist: {requires}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={hashlib.sha256(d).hexdigest()},{len(d)}\n" for p, d in files.items())
    files[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    path = folder / f"{dist.replace('-1.0', '')}-1.0-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    path.write_bytes(buf.getvalue())
    return path


def test_a_package_that_wants_another_torch_is_refused(docker_engine: Engine, standin: str, mirror: Any,
                                                       tmp_path: Path, stable_context: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    wheels = tmp_path / "local-wheels"
    _wheel(wheels, "needs-new-torch", "torch==2.14.1")
    spec = _spec(tmp_path / "spec", ["needs-new-torch==1.0"])
    flags = replace(mirror.layer, find_links=(*mirror.layer.find_links, str(wheels)))
    tag = f"kiln-test/on-standin-refused:{os.getpid()}"
    options = BuildOptions(tag=tag, context_dir=stable_context("on-standin-refused"), flags=flags)
    with pytest.raises(BuildError) as e:
        build_image(spec, docker_engine, options, env={})
    msg = e.value.message
    assert "needs-new-torch 1.0 needs torch==2.14.1" in msg, msg
    assert "torch" in (e.value.hint or "") and "constraint" in (e.value.hint or "")
    assert not docker_engine.image_exists(tag)


FAKE_CUDA = "kiln-test/ngc-standin:fake-cu130"
FIXTURE_SO = Path(__file__).parents[1] / "fixtures" / "fatbin" / "multi.so"


def test_targets_are_checked_against_the_arch_list_read_from_the_image(
    docker_engine: Engine, offline_base: str, stable_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small image whose torch/lib/libtorch_cuda.so is a real nvcc-built library (sm_75, sm_80, sm_90,
    sm_90a, compute_90): a V100 target fails at resolve time naming those, A100 + H100 pass."""
    from torchkiln.errors import ResolveError
    from torchkiln.load import engine_facts, load_plan

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    ctx = stable_context("fake-cu130")
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "libtorch_cuda.so").write_bytes(FIXTURE_SO.read_bytes())
    (ctx / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\ngit_version = 'abc'\n")
    (ctx / "Dockerfile").write_text(
        f"FROM {offline_base}\n"
        f"COPY version.py {SITE}/torch/version.py\n"
        f"COPY libtorch_cuda.so {SITE}/torch/lib/libtorch_cuda.so\n"
        "ENV NVIDIA_PYTORCH_VERSION=25.10\n")
    docker_engine.runner.run([docker_engine.info.binary, "build", "-q", "-t", FAKE_CUDA, str(ctx)],
                             what=f"build {FAKE_CUDA}", env={"DOCKER_BUILDKIT": "1"})
    try:
        spec = tmp_path / "kiln.toml"
        spec.write_text(f'[image]\nname = "acme/t"\n\n[base]\nimage = "{FAKE_CUDA}"\n\n[torch]\nsource = "image"\n\n'
                        '[gpu]\ntargets = ["V100", "H100"]\n')
        with pytest.raises(ResolveError) as e:
            load_plan(spec, facts=engine_facts(docker_engine))
        assert (f"has no kernel image for V100 (compute capability 7.0): its {SITE}/torch/lib/libtorch_cuda.so "
                "carries sm_75 sm_80 sm_90 sm_90a compute_90 (read from the image)") in e.value.message
        assert {"gpu": {"targets": ["H100"]}} in e.value.fixes
        spec.write_text(spec.read_text().replace('["V100", "H100"]', '["A100", "H100"]'))
        _spec, plan, _ = load_plan(spec, facts=engine_facts(docker_engine))
        assert [t.covered for t in plan.targets] == [True, True]
        assert plan.torch.cuda == "13.0" and plan.torch.wheel_arch_list == "7.5;8.0;9.0+PTX"
        assert any("NGC 25.10 row" in w and "torch 2.14.1+cu130" in w for w in plan.warnings)  # the cross-check
    finally:
        docker_engine.remove_image(FAKE_CUDA)
