"""kiln prune on real nvcc-built fat binaries: smaller files, still valid ELF, exactly the kept entries.

Fixtures: the committed ones of tests/fixtures/fatbin (nvcc 13.0; multi.so holds sm_75/80/90/90a and
compute_90 in two containers) and, where nvcc is installed, a six-architecture library built at
test time. pyelftools checks the rewritten files independently of our own reader.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import zipfile
from itertools import product
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from torchkiln.arch import ArchEntry, Capability
from torchkiln.cli import main
from torchkiln.inspect import prune
from torchkiln.inspect.coverage import Target, binary_coverage
from torchkiln.inspect.fatbin import FatbinEntry, list_entries

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"
H100 = (9, 0)


def copy(tmp_path: Path, name: str, dest: str | None = None) -> Path:
    out = tmp_path / (dest or name)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / name, out)
    return out


def elf_check(before: Path, after: Path) -> None:
    """The rewritten file parses, every allocated section keeps its address and (but for the fat
    binary and the pointers to it) its bytes, and every PT_LOAD keeps offset ≡ address (mod align)."""
    with before.open("rb") as fa, after.open("rb") as fb:
        a, b = ELFFile(fa), ELFFile(fb)
        assert b.num_sections() == a.num_sections()
        for sa, sb in zip(a.iter_sections(), b.iter_sections()):
            assert sa.name == sb.name
            assert sa["sh_addr"] == sb["sh_addr"], sa.name
            if sa["sh_flags"] & 2 and sa["sh_type"] != "SHT_NOBITS" and sa.name not in (
                    ".nv_fatbin", ".nvFatBinSegment", ".rela.dyn", ".symtab", ".dynsym"):
                assert sa.data() == sb.data(), sa.name
        loads = [s for s in b.iter_segments() if s["p_type"] == "PT_LOAD"]
        assert [s["p_vaddr"] for s in loads] == sorted(s["p_vaddr"] for s in loads)
        for s in loads:
            assert (s["p_offset"] - s["p_vaddr"]) % s["p_align"] == 0
            assert s["p_offset"] + s["p_filesz"] <= after.stat().st_size
        # every allocated section lies inside a PT_LOAD at the same distance from its start
        for sec in b.iter_sections():
            if sec["sh_flags"] & 2 and sec["sh_type"] != "SHT_NOBITS" and sec["sh_size"]:
                seg = [s for s in loads if s["p_vaddr"] <= sec["sh_addr"] < s["p_vaddr"] + s["p_memsz"]]
                assert len(seg) == 1, sec.name
                assert sec["sh_offset"] - seg[0]["p_offset"] == sec["sh_addr"] - seg[0]["p_vaddr"], sec.name
        # the CUDA runtime finds each container through .nvFatBinSegment: each must point at one
        fat = b.get_section_by_name(".nv_fatbin")
        seg_data = b.get_section_by_name(".nvFatBinSegment").data()
        rela = {r["r_offset"]: r["r_addend"] for r in b.get_section_by_name(".rela.dyn").iter_relocations()}
        base = b.get_section_by_name(".nvFatBinSegment")["sh_addr"]
        for i in range(0, len(seg_data), 24):
            magic, _v, ptr = struct.unpack_from("<IIQ", seg_data, i)
            assert magic == 0x466243B1
            target = rela.get(base + i + 8, ptr)
            off = fat["sh_offset"] + target - fat["sh_addr"]
            fb.seek(off)
            assert fb.read(4) == struct.pack("<I", 0xBA55ED50), f"wrapper {i // 24} points at no container"


def test_multi_so_shrinks_and_keeps_exactly_the_target(tmp_path: Path) -> None:
    src = FIXTURES / "multi.so"
    so = copy(tmp_path, "multi.so")
    r = prune.prune_file(str(so), [H100])
    assert r.status == "pruned"
    assert so.stat().st_size == r.size_after < src.stat().st_size
    assert [e.arch for e in list_entries(so)] == ["sm_90", "sm_90a", "sm_90", "sm_90a"]
    assert (r.entries_before, r.entries_after) == (9, 4)
    assert r.dropped == ["sm_75", "sm_80", "compute_90"]
    elf_check(src, so)
    # kiln inspect's coverage still finds 9.0 served by its own SASS
    cov = binary_coverage(list_entries(so), [Target("H100", Capability(9, 0))])
    assert cov[0].runs and cov[0].how == "sass"


def test_pruned_library_still_loads(tmp_path: Path) -> None:
    """glibc maps the split segments (the constructor registers the fat binaries with the runtime)."""
    try:
        ctypes.CDLL(str(FIXTURES / "multi.so"))
    except OSError as e:  # libcudart.so.13 not installed here
        pytest.skip(f"the unpruned fixture does not load either: {e}")
    so = copy(tmp_path, "multi.so")
    assert prune.prune_file(str(so), [H100]).status == "pruned"
    ctypes.CDLL(str(so))


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    so = copy(tmp_path, "multi.so")
    before = so.read_bytes()
    r = prune.prune_file(str(so), [H100], dry_run=True)
    assert r.status == "pruned" and r.size_after < len(before)
    assert so.read_bytes() == before


def test_ptx_is_kept_on_request(tmp_path: Path) -> None:
    so = copy(tmp_path, "compress_all.so")
    prune.prune_file(str(so), [H100], ptx=True)
    assert sorted({e.arch for e in list_entries(so)}) == ["compute_90", "sm_90", "sm_90a"]
    so2 = copy(tmp_path, "compress_all.so", "b.so")
    prune.prune_file(str(so2), [H100])
    assert sorted({e.arch for e in list_entries(so2)}) == ["sm_90", "sm_90a"]


def test_too_little_freed_zeroes_and_says_so(tmp_path: Path) -> None:
    so = copy(tmp_path, "ptx_only.so")
    size = so.stat().st_size
    r = prune.prune_file(str(so), [H100])
    assert r.status == "zeroed" and "page" in r.note
    assert so.stat().st_size == size
    assert [e.arch for e in list_entries(so)] == ["compute_80"]  # compute_120 cannot run on 9.0


def test_second_prune_finds_nothing_to_do(tmp_path: Path) -> None:
    so = copy(tmp_path, "multi.so")
    prune.prune_file(str(so), [H100])
    data = so.read_bytes()
    assert prune.prune_file(str(so), [H100]).status == "unchanged"
    assert so.read_bytes() == data


def test_nvidia_libraries_are_reported_not_modified(tmp_path: Path) -> None:
    so = copy(tmp_path, "multi.so", "site-packages/nvidia/cublas/lib/libcublas.so.13")
    mine = copy(tmp_path, "multi.so", "site-packages/torch/lib/libtorch_cuda.so")
    before = so.read_bytes()
    results = {Path(r.path).name: r for r in prune.prune_tree(str(tmp_path), [H100])}
    assert so.read_bytes() == before
    nv = results["libcublas.so.13"]
    assert nv.status == "nvidia" and nv.foreign_bytes > 0 and nv.size_after == nv.size_before
    assert results["libtorch_cuda.so"].status == "pruned" and mine.stat().st_size < len(before)
    assert prune.is_nvidia_library("/x/libcudnn_adv.so.9") and prune.is_nvidia_library("libnccl.so.2")
    assert not prune.is_nvidia_library("/site-packages/torch/lib/libtorch_nvshmem.so")


def test_wheel_record_is_rewritten(tmp_path: Path) -> None:
    whl = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    so_bytes = (FIXTURES / "multi.so").read_bytes()
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("demo/__init__.py", "")
        z.writestr("demo/_C.so", so_bytes)
        digest = base64.urlsafe_b64encode(hashlib.sha256(so_bytes).digest()).rstrip(b"=").decode()
        z.writestr("demo-1.0.dist-info/RECORD",
                   f"demo/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n"
                   f"demo/_C.so,sha256={digest},{len(so_bytes)}\ndemo-1.0.dist-info/RECORD,,\n")
    results = prune.prune_tree(str(whl), [H100])
    assert [r.status for r in results] == ["pruned"]
    with zipfile.ZipFile(whl) as z:
        assert z.namelist() == ["demo/__init__.py", "demo/_C.so", "demo-1.0.dist-info/RECORD"]
        new = z.read("demo/_C.so")
        record = {line.split(",")[0]: line.split(",")[1:] for line in z.read("demo-1.0.dist-info/RECORD").decode().split()}
    assert len(new) < len(so_bytes)
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(new).digest()).rstrip(b"=").decode()
    assert record["demo/_C.so"] == [want, str(len(new))]


def entry(kind: str, arch: str) -> FatbinEntry:
    a = ArchEntry.parse(arch)
    return FatbinEntry(kind=kind, sm=a.capability.number, suffix=a.suffix, compressed=False,  # type: ignore[arg-type]
                       compression=None, section=".nv_fatbin", container=0, offset=0, header_size=64,
                       payload_size=len(arch) * 8, compressed_size=0, uncompressed_size=0, flags=0,
                       code_version=(1, 8))


@pytest.mark.parametrize(("archs", "target", "ptx", "kept"), [
    (["sm_80", "sm_90", "sm_90a", "sm_100"], (9, 0), False, ["sm_90", "sm_90a"]),
    (["sm_80", "sm_86", "sm_90"], (8, 9), False, ["sm_86"]),  # newest SASS of the same major
    (["sm_80", "compute_80"], (9, 0), False, ["compute_80"]),  # no SASS runs: the PTX keeps coverage
    (["sm_90", "compute_80", "compute_90", "compute_120"], (9, 0), True, ["sm_90", "compute_90"]),
    (["sm_90", "compute_90"], (9, 0), False, ["sm_90"]),
    (["sm_100a", "sm_120"], (9, 0), False, ["sm_120"]),  # nothing runs: the smallest entry keeps it valid
    (["sm_100f", "sm_103a"], (10, 3), False, ["sm_100f", "sm_103a"]),
])
def test_select(archs: list[str], target: tuple[int, int], ptx: bool, kept: list[str]) -> None:
    entries = [entry("ptx" if a.startswith("compute") else "sass", a) for a in archs]
    keep = prune.select(entries, [target], ptx)
    assert [a for a, k in zip(archs, keep) if k] == kept


def test_runs_on_matches_the_arch_module() -> None:
    for kind, sm, suffix, dev in product(("sass", "ptx"), (75, 80, 86, 90, 100, 103, 120), ("", "a", "f"),
                                         [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0)]):
        want = ArchEntry(kind, Capability(sm // 10, sm % 10), suffix).runs_on(Capability(*dev))  # type: ignore[arg-type]
        assert prune.runs_on(kind, sm, suffix, dev) == want


def test_cli_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    so = copy(tmp_path, "multi.so")
    assert main(["prune", str(so), "--targets", "H100", "--json", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["targets"] == ["9.0"] and out["files"][0]["status"] == "pruned"
    assert main(["prune", str(tmp_path / "nope.so"), "-t", "9.0"]) == 7
    txt = tmp_path / "a.txt"
    txt.write_text("hello")
    assert main(["prune", str(txt), "-t", "9.0"]) == 7
    assert "not an ELF file" in capsys.readouterr().err


def test_standalone_script_runs_without_torchkiln(tmp_path: Path) -> None:
    """The Dockerfile runs prune.py with fatbin.py beside it and nothing else importable."""
    src = Path(prune.__file__).parent
    for name in ("prune.py", "fatbin.py"):
        shutil.copyfile(src / name, tmp_path / name)
    so = copy(tmp_path, "multi.so", "lib/x.so")
    proc = subprocess.run(["python3", "-I", str(tmp_path / "prune.py"), "--targets", "9.0", "--json", str(so.parent)],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["summary"]["bytes_after"] < (FIXTURES / "multi.so").stat().st_size


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_six_architecture_library_built_now(tmp_path: Path) -> None:
    """A library nvcc builds for six targets (two kernels, static runtime) prunes to 9.0 and still loads."""
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void a(float* x) { x[threadIdx.x] *= 2.f; }\n"
                  "__global__ void b(double* x, int n) { for (int i = 0; i < n; ++i) x[i] = sin(x[i]); }\n"
                  'extern "C" void* pa() { return (void*)a; }\nextern "C" void* pb() { return (void*)b; }\n')
    so = tmp_path / "libk.so"
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ("75", "80", "86", "90", "100", "120")]
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-Xfatbin", "-compress=false", *gencode,
                    "-gencode=arch=compute_120,code=compute_120", "-o", str(so), str(cu)], check=True,
                   capture_output=True)
    orig = tmp_path / "orig.so"
    shutil.copyfile(so, orig)
    r = prune.prune_file(str(so), [H100, (8, 6)])
    assert r.status == "pruned" and so.stat().st_size < orig.stat().st_size
    assert sorted({e.arch for e in list_entries(so)}) == ["sm_86", "sm_90"]
    elf_check(orig, so)
    ctypes.CDLL(str(so))


# ------------------------------------------------------------------------------- the rendered image

EXAMPLES = Path(__file__).parents[2] / "examples"


def _plan(name: str, **gpu: object):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    from torchkiln.knowledge import load_knowledge
    from torchkiln.resolve import resolve
    from torchkiln.spec import Spec

    data = tomllib.loads((EXAMPLES / name).read_text())
    data.setdefault("gpu", {}).update(gpu)
    return resolve(Spec.model_validate(data), load_knowledge())


def test_targets_prune_torch_and_extensions_in_their_install_steps(tmp_path: Path) -> None:
    from torchkiln.building.context import dockerfile_context
    from torchkiln.contract import image_labels
    from torchkiln.render import render_dockerfile

    plan = _plan("custom-ext.toml")
    assert plan.prune is not None and plan.prune.targets == ("8.0", "9.0") and plan.prune.ptx
    assert plan.prune.what == ("torch", "extension-libraries")
    text = render_dockerfile(plan)
    torch_step = text.split("FROM base AS torch")[1].split("\nFROM ")[0]
    assert "prune.py --targets 8.0,9.0 --ptx /opt/venv/lib/python3.11/site-packages/torch" in torch_step
    ext_step = text.split("AS ext-layer")[1].split("\nFROM ")[0]
    assert "prune.py --targets 8.0,9.0 --ptx /opt/kiln-ext-layer" in ext_step
    assert "source=.kiln/prune,target=/kiln/prune" in torch_step and "source=.kiln/prune" in ext_step
    labels = image_labels(plan)
    assert labels["io.torchkiln.pruned"] == "torch,extension-libraries"
    assert labels["io.torchkiln.pruned-to"] == "8.0,9.0+ptx"
    copies = dockerfile_context(plan, EXAMPLES).copies
    assert {".kiln/prune/prune.py", ".kiln/prune/fatbin.py"} <= set(copies)
    assert any(d.topic == "fat binaries" and "pruned to 8.0, 9.0" in d.choice for d in plan.decisions)
    assert json.loads(json.dumps(plan.to_dict()["prune"])) == {"targets": ["8.0", "9.0"], "ptx": True,
                                       "what": ["torch", "extension-libraries"]}


def test_prune_false_and_no_targets_keep_fat_binaries_whole() -> None:
    from torchkiln.building.context import dockerfile_context
    from torchkiln.render import render_dockerfile

    off = _plan("cu130-hopper.toml", prune=False)
    assert off.prune is None and "prune.py" not in render_dockerfile(off)
    assert any(d.topic == "fat binaries" and d.choice == "kept whole" for d in off.decisions)
    assert not any(k.startswith(".kiln/prune") for k in dockerfile_context(off, EXAMPLES).copies)
    assert _plan("cu130-hopper.toml", targets=[]).prune is None
    assert _plan("cpu.toml").prune is None


def test_installed_record_follows_the_pruned_file(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    so = copy(tmp_path, "multi.so", "site-packages/demo/lib/libdemo.so")
    info = site / "demo-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("demo/__init__.py,,\ndemo/lib/libdemo.so,sha256=old,56296\ndemo-1.0.dist-info/RECORD,,\n")
    prune.prune_tree(str(site / "demo"), [H100])
    digest = base64.urlsafe_b64encode(hashlib.sha256(so.read_bytes()).digest()).rstrip(b"=").decode()
    assert (info / "RECORD").read_text().splitlines()[1] == f"demo/lib/libdemo.so,sha256={digest},{so.stat().st_size}"
