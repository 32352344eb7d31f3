"""Facts of a torch-bearing image (images/facts.py) and the resolver on them (resolve/image.py).

The archives here are real docker-archives written with tarfile: an NGC-like file system (torch in
/usr/local/lib/python3.12/dist-packages, /etc/pip/constraint.txt, /usr/local/cuda-13.1 with nvcc),
NGC's environment names, and as ``libtorch_cuda.so`` a real nvcc-built library from
tests/fixtures/fatbin. The SASS list of a real CUDA torch is read from the torch 2.14.1 (cu130)
wheel of the configured mirror when it holds one.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import time
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from torchkiln.errors import InputError, ResolveError, SpecError
from torchkiln.image_facts import ImageFacts, arch_list_of
from torchkiln.images.facts import (
    Collected,
    constraint_pins,
    facts_from_files,
    read_archive_facts,
)
from torchkiln.inspect.fatbin import read_fatbins
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.spec import parse_spec

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"
SITE = "usr/local/lib/python3.12/dist-packages"
NGC = "nvcr.io/nvidia/pytorch:25.12-py3"
VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.10.0a0+b4e4ee81d3'
debug = False
cuda: Optional[str] = '13.1'
git_version = 'b4e4ee81d3ab8c1e4c6bcbf4b0a0e5f6a7b8c9d0'
hip: Optional[str] = None
xpu: Optional[str] = None
"""
CONSTRAINTS = "# NGC constraints\nnumpy==1.26.4\ntorch==2.10.0a0+b4e4ee81d3\ntransformer_engine==2.9.0\n-e ./x\n"
ENV = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin", "NVIDIA_PYTORCH_VERSION=25.12",
       "PYTORCH_VERSION=2.10.0a0+b4e4ee81d3", "CUDA_VERSION=13.1.0.036", "PIP_CONSTRAINT=/etc/pip/constraint.txt",
       "TORCH_CUDA_ARCH_LIST=7.5 8.0 8.6 9.0 10.0 12.0+PTX", "UNRELATED=1"]


def _layer(entries: list[tuple[str, bytes | str | None]]) -> bytes:
    """A layer tar: (path, bytes) files, (path, "->target") links, (path, None) directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in entries:
            ti = tarfile.TarInfo(path)
            if content is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(ti)
            elif isinstance(content, str):
                ti.type, ti.linkname = tarfile.SYMTYPE, content.removeprefix("->")
                tar.addfile(ti)
            else:
                ti.size, ti.mode = len(content), 0o644
                tar.addfile(ti, io.BytesIO(content))
    return buf.getvalue()


def write_archive(dest: Path, layers: list[bytes], env: list[str], labels: dict[str, str] | None = None) -> Path:
    """A docker-archive as `docker save` writes it: layer tars, a config, a manifest."""
    ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env, "Labels": labels or {}},
        "rootfs": {"type": "layers", "diff_ids": ids},
        "history": [{"created_by": f"step {i}"} for i in range(len(layers))],
    }).encode()
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [f"{i.removeprefix('sha256:')}/layer.tar" for i in ids]
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [NGC], "Layers": names}]).encode()
    with tarfile.open(dest, "w") as tar:
        for name, data in [(cfg_name, config), ("manifest.json", manifest), *zip(names, layers, strict=True)]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return dest


def ngc_like(tmp_path: Path, *, later: list[bytes] = ()) -> Path:  # type: ignore[assignment]
    lib = (FIXTURES / "multi.so").read_bytes()
    os_layer = _layer([("usr/bin/python3.12", b"\x7fELF-not-really"), ("usr/bin/python3", "->python3.12"),
                       ("usr/local/cuda-13.1/bin/nvcc", b"nvcc"), ("usr/local/cuda", "->/usr/local/cuda-13.1"),
                       ("usr/local/cuda-13.1/version.json", json.dumps({"cuda": {"version": "13.1.0"}}).encode())])
    torch_layer = _layer([
        (f"{SITE}/torch/version.py", VERSION_PY.encode()),
        (f"{SITE}/torch/__init__.py", b"# torch\n"),
        (f"{SITE}/torch/lib/libtorch_cuda.so", lib),
        (f"{SITE}/torch-2.10.0a0+b4e4ee81d3.dist-info/METADATA", b"Metadata-Version: 2.1\nName: torch\n"
                                                                  b"Version: 2.10.0a0+b4e4ee81d3\n"),
        ("etc/pip/constraint.txt", CONSTRAINTS.encode()),
    ])
    return write_archive(tmp_path / "ngc.tar", [os_layer, torch_layer, *later], ENV,
                         {"com.nvidia.volumes.needed": "nvidia_driver", "maintainer": "x"})


def test_facts_are_read_from_an_ngc_like_archive(tmp_path: Path) -> None:
    archive = ngc_like(tmp_path)
    facts = read_archive_facts(archive, NGC)
    want = sorted({e.arch for e in read_fatbins(FIXTURES / "multi.so").entries if e.kind in ("sass", "ptx")})
    assert facts.origin == "image" and facts.torch_version == "2.10.0a0+b4e4ee81d3" and facts.torch_cuda == "13.1"
    assert facts.torch_git.startswith("b4e4ee81d3")
    assert (facts.python, facts.python_exe, facts.site) == ("3.12", "/usr/bin/python3.12", "/" + SITE)
    assert facts.constraints_path == "/etc/pip/constraint.txt" and facts.constraints_count == 3
    assert facts.constraints_torch == "torch==2.10.0a0+b4e4ee81d3"
    assert sorted(facts.arch_entries) == want and facts.arch_source == f"/{SITE}/torch/lib/libtorch_cuda.so"
    assert (facts.nvcc_cuda, facts.cuda_home) == ("13.1", "/usr/local/cuda")
    assert facts.ngc_release == "25.12" and facts.platform == "linux/amd64"
    assert dict(facts.env)["PIP_CONSTRAINT"] == "/etc/pip/constraint.txt" and "UNRELATED" not in dict(facts.env)
    assert dict(facts.labels) == {"com.nvidia.volumes.needed": "nvidia_driver"}
    assert facts.image_id.startswith("sha256:") and facts.notes == ()
    # only what is needed is read: headers, a few small files and the library's fat-binary headers
    assert 0 < facts.bytes_read < facts.image_size
    assert ImageFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts


def test_whiteouts_of_later_layers_are_applied(tmp_path: Path) -> None:
    gone = _layer([("etc/pip/.wh.constraint.txt", b""), ("usr/local/cuda-13.1/bin/.wh.nvcc", b"")])
    facts = read_archive_facts(ngc_like(tmp_path, later=[gone]), NGC)
    assert facts.constraints_path == "" and facts.constraints_torch == ""
    assert facts.cuda_home == "" and facts.nvcc_cuda == ""
    opaque = _layer([(f"{SITE}/.wh..wh..opq", b"")])
    with pytest.raises(InputError, match="has no torch"):
        read_archive_facts(ngc_like(tmp_path, later=[opaque]), NGC)


def test_a_later_layer_that_replaces_torch_wins(tmp_path: Path) -> None:
    newer = _layer([(f"{SITE}/torch/version.py", VERSION_PY.replace("2.10.0a0+b4e4ee81d3", "2.11.0").encode())])
    facts = read_archive_facts(ngc_like(tmp_path, later=[newer]), NGC)
    assert facts.torch_version == "2.11.0"
    assert facts.notes == ("torch/version.py says 2.11.0 but its METADATA says 2.10.0a0+b4e4ee81d3",)


def test_an_image_without_torch_is_exit_7_with_the_fix(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "bare.tar", [_layer([("usr/bin/python3.12", b"x")])], [])
    with pytest.raises(InputError) as e:
        read_archive_facts(archive, "debian:12")
    assert e.value.exit_code == 7 and 'source = "wheel"' in (e.value.hint or "")


def test_version_py_constraints_and_arch_list_parsing() -> None:
    assert constraint_pins(CONSTRAINTS) == {"numpy": "numpy==1.26.4", "torch": "torch==2.10.0a0+b4e4ee81d3",
                                            "transformer-engine": "transformer_engine==2.9.0"}
    from torchkiln.arch import ArchEntry

    entries = [ArchEntry.parse(a) for a in ("sm_80", "sm_90", "sm_90a", "sm_103f", "sm_120", "compute_120")]
    assert arch_list_of(entries) == "8.0;9.0;12.0+PTX"
    got = Collected(files={f"{SITE}/torch/version.py": b"__version__ = '2.13.0+cpu'\ncuda = None\n"},
                    present={"usr/bin/python3.12"})
    facts = facts_from_files("x", got)
    assert facts.torch_cuda is None and facts.arch_entries == () and facts.constraints_path == ""


# -- the resolver on the facts --------------------------------------------------------------------------


def _facts(**changes: object) -> ImageFacts:
    base = ImageFacts(
        image=NGC, origin="image", torch_version="2.10.0a0+b4e4ee81d3", torch_cuda="13.1", torch_git="",
        python="3.12", python_exe="/usr/bin/python3.12", site="/" + SITE, constraints_path="/etc/pip/constraint.txt",
        constraints_torch="torch==2.10.0a0+b4e4ee81d3", constraints_count=3,
        arch_entries=("sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
        arch_source=f"/{SITE}/torch/lib/libtorch_cuda.so", nvcc_cuda="13.1", cuda_home="/usr/local/cuda",
        env=(("NVIDIA_PYTORCH_VERSION", "25.12"),), image_size=20_000_000_000,
    )
    from dataclasses import replace

    return replace(base, **changes)


def _spec(**tables: object):  # type: ignore[no-untyped-def]
    data: dict[str, object] = {"image": {"name": "acme/t"}, "base": {"image": NGC}, "torch": {"source": "image"}}
    data.update(tables)
    return parse_spec(data)


def test_a_v100_target_is_refused_with_the_arch_list_read_from_the_image() -> None:
    spec = _spec(gpu={"targets": ["V100", "H100"]})
    with pytest.raises(ResolveError) as e:
        resolve(spec, load_knowledge(), _facts())
    msg = e.value.message
    assert "no kernel image for V100 (compute capability 7.0)" in msg
    assert f"its /{SITE}/torch/lib/libtorch_cuda.so carries sm_80 sm_86 sm_90 sm_100 sm_120 compute_120 " \
        "(read from the image)" in msg
    assert e.value.exit_code == 4
    assert {"gpu": {"targets": ["H100"]}} in e.value.fixes  # each fix resolves against the same facts
    # the same spec against a torch that has sm_70 passes
    plan = resolve(spec, load_knowledge(), _facts(arch_entries=("sm_70", "sm_80", "sm_90")))
    assert [(t.name, t.covered, t.how) for t in plan.targets] == [("V100", True, "SASS sm_70"),
                                                                  ("H100", True, "SASS sm_90")]


def test_the_plan_takes_everything_from_the_image() -> None:
    plan = resolve(_spec(gpu={"targets": ["A100", "H100"]}, packages={"pip": ["einops==0.8.1"]}),
                   load_knowledge(), _facts())
    t = plan.torch
    assert (t.version, t.cuda, t.variant, t.requirement) == ("2.10.0a0+b4e4ee81d3", "13.1", "cu131",
                                                             "torch==2.10.0a0+b4e4ee81d3")
    assert t.image is not None and t.image.constraints == "/etc/pip/constraint.txt" and t.image.devel
    assert t.image.facts.startswith("read from the image")
    assert (plan.python, plan.python_exe, plan.base_image) == ("3.12", "/usr/bin/python3.12", NGC)
    assert plan.arch_list == "8.0;9.0+PTX" and plan.min_driver == "580.65.06"
    assert t.wheel_arch_list == "8.0;8.6;9.0;10.0;12.0+PTX"
    runtime = next(d for d in plan.decisions if d.topic == "runtime stage")
    assert "already a development image" in runtime.why and "no slim stage" in runtime.why
    assert "(20.0 GB)" in runtime.choice
    assert "measured 5.9 GB for torch 2.14.1 cu130" in runtime.why and "against 20.0 GB for" in runtime.why
    assert plan.warnings == ()  # the image agrees with knowledge/ngc.toml's 25.12 row


def test_disagreement_with_the_knowledge_row_is_reported_and_the_image_wins() -> None:
    plan = resolve(_spec(), load_knowledge(), _facts(torch_version="2.10.0a0+ffff", python="3.13"))
    assert plan.torch.version == "2.10.0a0+ffff" and plan.python == "3.13"
    (warning,) = plan.warnings
    assert "disagrees with the knowledge base's NGC 25.12 row" in warning
    assert "torch 2.10.0a0+ffff (the row says 2.10.0a0+b4e4ee81d3)" in warning and "Python 3.13" in warning


def test_without_the_image_the_knowledge_row_is_used_and_said() -> None:
    plan = resolve(_spec(gpu={"targets": ["H100"]}), load_knowledge(), None)
    assert plan.torch.version == "2.10.0a0+b4e4ee81d3" and plan.torch.cuda == "13.1"
    assert any("was not read" in w for w in plan.warnings)
    assert plan.targets[0].how.startswith("not checked")
    with pytest.raises(ResolveError, match="CUDA 13.1 .* supports compute capability 7.5 and newer: V100"):
        resolve(_spec(gpu={"targets": ["V100"]}), load_knowledge(), None)
    with pytest.raises(ResolveError, match="could not read acme/own-torch") as e:
        resolve(_spec(base={"image": "acme/own-torch:1"}), load_knowledge(), None)
    assert "docker pull acme/own-torch:1" in (e.value.hint or "")


def test_asserted_version_cuda_python_and_driver() -> None:
    kb, facts = load_knowledge(), _facts()
    resolve(_spec(torch={"source": "image", "version": ">=2.10.0a0,<2.11"}), kb, facts)
    resolve(_spec(torch={"source": "image", "version": "2.10.0a0+b4e4ee81d3", "cuda": "13.1"}), kb, facts)
    with pytest.raises(ResolveError) as e:
        resolve(_spec(torch={"source": "image", "version": "2.9.1"}), kb, facts)
    assert "brings torch 2.10.0a0+b4e4ee81d3, but [torch] version asks for 2.9.1" in e.value.message
    assert {"torch": {"version": "2.10.0a0+b4e4ee81d3"}} in e.value.fixes
    with pytest.raises(ResolveError, match='cuda = "cpu"'):
        resolve(_spec(torch={"source": "image", "cuda": "cpu"}), kb, facts)
    with pytest.raises(ResolveError, match='installed for Python 3.12, but \\[python\\] version = "3.11"'):
        resolve(_spec(python={"version": "3.11"}), kb, facts)
    with pytest.raises(ResolveError, match="needs driver 580.65.06 or newer.*NGC 25.12"):
        resolve(_spec(gpu={"min_driver": "535.104"}), kb, facts)


def test_extensions_use_the_images_nvcc_and_never_a_prebuilt_wheel() -> None:
    spec = _spec(gpu={"targets": ["H100"]}, extensions=[{"name": "flash-attn", "version": "2.8.3"}])
    plan = resolve(spec, load_knowledge(), _facts())
    (ext,) = plan.extensions
    assert ext.build == "source" and ext.no_build_isolation and ext.prebuilt is None
    assert plan.toolchain is not None and plan.toolchain.kind == "image"
    assert plan.toolchain.cuda_home == "/usr/local/cuda"
    assert plan.toolchain.apt == ()  # a development image has its compilers
    with pytest.raises(ResolveError, match="has no nvcc"):
        resolve(spec, load_knowledge(), _facts(cuda_home="", nvcc_cuda=""))


def test_the_spec_refuses_what_an_image_torch_cannot_mean() -> None:
    with pytest.raises(SpecError, match="set \\[base\\] image"):
        parse_spec({"image": {"name": "a"}, "torch": {"source": "image"}})
    with pytest.raises(SpecError, match="remove \\[torch\\] packages"):
        _spec(torch={"source": "image", "packages": ["torchvision"]})
    with pytest.raises(SpecError, match="'git' and 'ref'"):
        _spec(torch={"source": "image", "ref": "v2.5.1"})
    with pytest.raises(SpecError, match="image's own Python"):
        _spec(base={"image": NGC, "python": "apt"})


def _mirror_wheel(name: str) -> Path | None:
    """A wheel file of the configured mirror (a PEP 503 folder named in pip's configuration)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    for url in re.findall(r"file://[^\s'\"]+", out):
        page = Path(urllib.parse.urlsplit(url).path) / "torch" / "index.html"
        if page.is_file():
            for href in re.findall(r'href="([^"#]+)', page.read_text()):
                if href.rsplit("/", 1)[-1] == name:
                    p = (page.parent / href).resolve()
                    if p.is_file():
                        return p
    return None


@pytest.mark.slow
def test_the_arch_list_of_a_real_cuda_torch(tmp_path: Path) -> None:
    """libtorch_cuda.so of the torch 2.14.1 cu130 wheel: what kiln reads refuses a V100 and passes a T4."""
    wheel = _mirror_wheel("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")
    if wheel is None:
        pytest.skip("the configured mirror has no torch 2.14.1 (cu130) wheel")
    lib = tmp_path / "libtorch_cuda.so"
    with zipfile.ZipFile(wheel) as z, z.open("torch/lib/libtorch_cuda.so") as src, open(lib, "wb") as dst:
        while chunk := src.read(8 << 20):
            dst.write(chunk)
    t0 = time.perf_counter()
    entries = tuple(sorted({e.arch for e in read_fatbins(lib).entries if e.kind in ("sass", "ptx")}))
    assert time.perf_counter() - t0 >= 0  # (timing is reported by bench/, not asserted)
    facts = _facts(torch_version="2.14.1", torch_cuda="13.0", nvcc_cuda="13.0", python="3.11",
                   python_exe="/usr/bin/python3.11", arch_entries=entries, env=())
    row = load_knowledge().arch_row("2.14", "13.0")
    # every arch of the measured row (torch.cuda.get_arch_list()) is in the library; it also carries a few
    # kernels for more (sm_89, and arch-specific sm_90a, sm_100a...), which the row does not list
    assert row is not None and {e.name for e in row.entries} <= set(entries)
    assert {"sm_89", "sm_90a", "sm_100a"} <= set(entries)
    spec = _spec(base={"image": "acme/torch-2.14.1:cu130"}, gpu={"targets": ["T4", "V100"]})
    with pytest.raises(ResolveError, match="no kernel image for V100"):
        resolve(spec, load_knowledge(), facts)
    plan = resolve(_spec(base={"image": "acme/torch-2.14.1:cu130"}, gpu={"targets": ["T4", "H100"]}),
                   load_knowledge(), facts)
    assert plan.targets[0].how == "SASS sm_75" and plan.targets[1].covered


@pytest.mark.parametrize("log", [
    # uv, as the packages stage on the stand-in prints it
    "error: No solution found when resolving dependencies\n  cause: Because all versions of needs-new-torch depend on "
    "torch==2.14.1 and torch==2.13.0+cpu, we can conclude that all versions of needs-new-torch cannot be used.\n"
    "And because you require needs-new-torch==1.0, we can conclude that your requirements are unsatisfiable.",
    # uv's other wording, and pip's
    "× No solution found when resolving dependencies:\n╰─▶ Because needs-new-torch==1.0 depends on torch==2.14.1 and "
    "you require torch==2.13.0+cpu, we can conclude that needs-new-torch==1.0 cannot be used.",
    "ERROR: Cannot install needs-new-torch==1.0 because these package versions have conflicting dependencies.\n"
    "The conflict is caused by:\n    needs-new-torch 1.0 depends on torch==2.14.1\n"
    "    The user requested (constraint) torch==2.13.0+cpu\n",
])
def test_a_package_wanting_another_torch_is_named_with_the_torch_it_wanted(log: str) -> None:
    from torchkiln.engines.engine import _torch_conflict

    e = _torch_conflict(log, "stage 'packages'", log)
    assert e is not None and e.exit_code == 6
    assert e.message.startswith("needs-new-torch 1.0 needs torch==2.14.1, but the image's torch 2.13.0+cpu is pinned")
    assert "PIP_CONSTRAINT" in (e.hint or "")
    assert _torch_conflict("error: No solution found when resolving dependencies: numpy>=9", "x", "") is None
