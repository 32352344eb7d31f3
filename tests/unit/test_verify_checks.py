"""The in-image check module's logic: architecture rules, drivers, peaks, ELF scanning, reports.

The numerics checks are run for real on the CPU (the same code the GPU runs, with the device set
to "cpu"); the GPU runs themselves are recorded in docs/verify.md.
"""

from __future__ import annotations

import ast
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchkiln.arch import ArchEntry, Capability, coverage
from torchkiln.errors import ExitCode
from torchkiln.knowledge import load_knowledge
from torchkiln.verify import checks

REPO = Path(__file__).resolve().parents[2]
CHECKS_PY = REPO / "src" / "torchkiln" / "verify" / "checks.py"
FATBIN_FIXTURES = REPO / "tests" / "fixtures" / "fatbin"


def test_exit_codes_match_the_errors_module() -> None:
    assert checks.EXIT_OK == ExitCode.OK
    assert checks.EXIT_CHECK_FAILED == ExitCode.CHECK_FAILED
    assert checks.EXIT_USAGE == ExitCode.USAGE
    assert checks.EXIT_NO_GPU == ExitCode.NO_GPU


def test_module_imports_only_the_standard_library_at_top_level() -> None:
    tree = ast.parse(CHECKS_PY.read_text())
    top: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            top += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top.append(node.module.split(".")[0])
    assert top, "expected some imports"
    not_stdlib = sorted({m for m in top if m not in sys.stdlib_module_names and m != "__future__"})
    assert not_stdlib == [], f"checks.py must import only the stdlib at module level, found {not_stdlib}"
    nested = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any((getattr(n, "module", None) or "").startswith("torchkiln") for n in nested)
    assert not any(a.name.startswith("torchkiln") for n in nested if isinstance(n, ast.Import) for a in n.names)


# -- architecture rules: must agree with torchkiln.arch everywhere ---------------------------------

CAPS = ["7.0", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]
NAMES = [f"sm_{c.replace('.', '')}" for c in CAPS] + [f"compute_{c.replace('.', '')}" for c in CAPS] + [
    "sm_90a", "sm_100a", "sm_100f", "sm_120a", "sm_121a", "sm_103f", "compute_90a", "compute_100f", "compute_120a"]


@pytest.mark.parametrize("name", NAMES)
def test_runs_on_agrees_with_torchkiln_arch(name: str) -> None:
    ours = checks.parse_arch(name)
    theirs = ArchEntry.parse(name)
    assert ours is not None and ours.name == theirs.name
    for c in CAPS:
        dev = Capability.parse(c)
        assert ours.runs_on((dev.major, dev.minor)) == theirs.runs_on(dev), (name, c)


def test_best_entry_agrees_with_torchkiln_arch_coverage() -> None:
    lists = [
        ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],  # torch 2.14.1 cu130 (measured)
        ["sm_80"],
        ["sm_80", "compute_80"],
        ["sm_90a", "sm_100a"],
        ["sm_80", "sm_90", "sm_90a", "compute_90"],
        ["compute_75"],
        ["compute_90a", "compute_100f"],
        [],
    ]
    for names, c in itertools.product(lists, CAPS):
        dev = Capability.parse(c)
        ours = checks.best_arch((dev.major, dev.minor), [checks.parse_arch(n) for n in names])  # type: ignore[misc]
        theirs = coverage(dev, [ArchEntry.parse(n) for n in names])
        assert (ours.name if ours else None) == (theirs.entry.name if theirs.entry else None), (names, c)
        assert checks.describe_coverage((dev.major, dev.minor), ours) == theirs.how


def test_parse_arch_rejects_garbage() -> None:
    assert checks.parse_arch("sm_9") is None
    assert checks.parse_arch("gfx90a") is None
    assert checks.parse_arch("compute_90") == checks.Arch("ptx", 9, 0, "")


def test_why_not_runnable_names_what_is_there() -> None:
    entries = [checks.Arch("sass", 8, 0)]
    text = checks.why_not_runnable((9, 0), entries)
    assert "sm_80" in text and "9.0" in text and "no PTX" in text
    text = checks.why_not_runnable((8, 0), [checks.Arch("sass", 9, 0, "a"), checks.Arch("ptx", 9, 0)])
    assert "sm_90a" in text and "compute_90" in text and "newer than 8.0" in text


# -- drivers ---------------------------------------------------------------------------------------

PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROC_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Tue Oct 28 02:58:06 UTC 2025\nGCC version:  gcc version 12.3.0\n"
)


def test_parse_proc_driver_version() -> None:
    assert checks.parse_proc_driver_version(PROC_PROPRIETARY) == "535.104.05"
    assert checks.parse_proc_driver_version(PROC_OPEN) == "580.159.04"
    assert checks.parse_proc_driver_version("nothing here") is None


def test_parse_nvidia_smi_driver() -> None:
    assert checks.parse_nvidia_smi_driver("580.159.04\n580.159.04\n") == "580.159.04"
    assert checks.parse_nvidia_smi_driver("NVIDIA-SMI has failed\n") is None


def test_version_tuple() -> None:
    assert checks.version_tuple("580.65.06") == (580, 65, 6)
    assert checks.version_tuple("580") == (580,)
    assert checks.version_tuple("12.8") < checks.version_tuple("12.10")
    assert checks.cuda_version_from_int(13000) == "13.0"
    assert checks.cuda_version_from_int(12080) == "12.8"


@pytest.mark.parametrize(
    ("cuda", "driver", "status"),
    [
        ("13.0", "580.159.04", "pass"),  # the H100 machine
        ("13.0", "575.51.03", "fail"),  # a 12.9 driver cannot run CUDA 13
        ("12.8", "535.104.05", "pass"),  # minor-version compatibility: any 12.x on >= 525.60.13
        ("12.4", "525.60.13", "pass"),
        ("12.1", "520.61.05", "fail"),
        ("11.8", "450.80.02", "pass"),
        ("14.0", "600.1", "skip"),  # no known floor
    ],
)
def test_judge_driver(cuda: str, driver: str, status: str) -> None:
    v = checks.judge_driver(cuda, checks.DriverInfo(version=driver, source="test"))
    assert v.status == status, v.reason
    if status == "fail":
        assert "upgrade" in v.reason and driver in v.reason


def test_judge_driver_notes_minor_version_compatibility() -> None:
    v = checks.judge_driver("12.8", checks.DriverInfo(version="535.104.05"))
    assert "minor-version compatibility" in v.reason and "570.26" in v.reason


def test_judge_driver_prefers_the_spec_floor_and_falls_back_to_libcuda() -> None:
    v = checks.judge_driver("13.0", checks.DriverInfo(version="580.10.01"), min_driver="580.65.06")
    assert v.status == "fail" and v.required == "580.65.06"
    v = checks.judge_driver("13.0", checks.DriverInfo(cuda_supported="13.0"))
    assert v.status == "pass" and "13.0" in v.reason
    v = checks.judge_driver("13.0", checks.DriverInfo(cuda_supported="12.9"))
    assert v.status == "fail"
    assert checks.judge_driver("13.0", checks.DriverInfo()).status == "skip"
    assert checks.judge_driver(None, checks.DriverInfo()).status == "skip"


def test_driver_floors_agree_with_the_knowledge_base() -> None:
    k = load_knowledge()
    for major, floor in checks.MVC_DRIVER_FLOOR.items():
        known, _src = k.driver_floor(f"{major}.0")
        # same driver branch (the knowledge base may name a later build of it)
        assert checks.version_tuple(known)[0] == checks.version_tuple(floor)[0], (major, known, floor)
        assert checks.version_tuple(known) >= checks.version_tuple(floor)
    for cuda, drv in checks.TOOLKIT_DRIVER.items():
        if cuda in k.toolkit_driver:
            assert k.toolkit_driver[cuda][0] == drv, cuda


# -- peaks, tolerances -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA H100 NVL", 835.5),
        ("NVIDIA H200", 989.4),
        ("NVIDIA H200 NVL", 835.5),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 366.5),
        ("NVIDIA A10", 125.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA GeForce RTX 4090", 165.2),
    ],
)
def test_bf16_peak(name: str, peak: float) -> None:
    got = checks.bf16_peak(name)
    assert got is not None and got[0] == peak


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3 MIG 1g.10gb", "Tesla T4", "NVIDIA A100X", "Quadro RTX 6000"])
def test_bf16_peak_unknown(name: str) -> None:
    # A100X is not in the table: the A10 pattern must not catch it, the A100 one does
    got = checks.bf16_peak(name)
    if "A100" in name:
        assert got is not None and got[0] == 312.0
    else:
        assert got is None


def test_nan_never_passes() -> None:
    assert not checks.rel_error_ok(float("nan"), 1.0)
    assert not checks.rel_error_ok(float("inf"), 1.0)
    assert checks.rel_error_ok(1e-3, 2e-3) and not checks.rel_error_ok(3e-3, 2e-3)


def test_bus_bandwidth_uses_the_nccl_tests_definition() -> None:
    alg, bus = checks.bus_bandwidth(1 << 30, 0.01, 8)
    assert alg == pytest.approx((1 << 30) / 0.01 / 1e9)
    assert bus == pytest.approx(alg * 2 * 7 / 8)
    assert checks.bus_bandwidth(100, 1.0, 2)[1] == pytest.approx(100 / 1e9)


# -- spec extensions --------------------------------------------------------------------------------


def test_spec_extensions() -> None:
    got = checks.spec_extensions({"extensions": ["flash-attn", {"name": "xformers"}, "my-ext",
                                                 {"name": "thing", "import": "thing_cuda"}]})
    assert got == [
        {"name": "flash-attn", "import": "flash_attn"},
        {"name": "xformers", "import": "xformers"},
        {"name": "my-ext", "import": "my_ext"},
        {"name": "thing", "import": "thing_cuda"},
    ]
    with pytest.raises(ValueError, match="each item"):
        checks.spec_extensions({"extensions": [3]})


def test_known_extensions_match_the_knowledge_base() -> None:
    k = load_knowledge()
    for name, imp in checks.KNOWN_EXTENSIONS.items():
        if name in k.extensions:
            assert k.extensions[name].import_name == imp


# -- ELF and fat binaries ----------------------------------------------------------------------------


def test_elf_sections_on_real_files() -> None:
    sections = checks.elf_sections(str(FATBIN_FIXTURES / "multi.so"))
    assert sections is not None and ".nv_fatbin" in sections and ".text" in sections
    off, size = sections[".nv_fatbin"]
    assert off > 0 and size > 0
    assert checks.elf_sections(str(FATBIN_FIXTURES / "build.sh")) is None  # not ELF
    py = checks.elf_sections(str(Path(sys.executable).resolve()))
    assert py is not None and ".nv_fatbin" not in py


def test_cuobjdump_listing_parser_reads_recorded_listings() -> None:
    listings = sorted(FATBIN_FIXTURES.glob("*.cuobjdump.txt")) + sorted(FATBIN_FIXTURES.glob("*.list*"))
    text = (
        "ELF file    1: libkiln.1.sm_80.cubin\n"
        "ELF file    2: libkiln.2.sm_90a.cubin\n"
        "PTX file    1: libkiln.1.sm_90.ptx\n"
    )
    got = checks.parse_cuobjdump_list(text)
    assert [a.name for a in got] == ["sm_80", "sm_90a", "compute_90"]
    for listing in listings:  # whatever the inspect fixtures recorded parses without loss
        lines = [ln for ln in listing.read_text().splitlines() if ln.startswith(("ELF file", "PTX file"))]
        assert len(checks.parse_cuobjdump_list("\n".join(lines))) == len(lines)


def test_fatbin_reader_is_found_in_the_source_tree_and_agrees_with_list_entries() -> None:
    from torchkiln.inspect import fatbin

    notes: list[str] = []
    reader = checks.find_fatbin_reader(CHECKS_PY.parent, notes)
    assert reader is not None and "fatbin.py" in reader.describe, notes
    for so in ("multi.so", "compress_all.so"):
        ours = sorted(set(reader.entries(str(FATBIN_FIXTURES / so))))
        theirs = sorted({checks.parse_arch(e.arch) for e in fatbin.list_entries(FATBIN_FIXTURES / so)
                         if e.kind in ("sass", "ptx")})  # type: ignore[type-var]
        assert ours and [a.name for a in ours] == [a.name for a in theirs]  # type: ignore[union-attr]


def test_kernel_free_device_link_stubs_are_told_apart() -> None:
    reader = checks.find_fatbin_reader(CHECKS_PY.parent, [])
    assert reader is not None
    # multi.so: nvlink's device-link stub (4 cubins, no kernel) followed by the source's own module
    archs, free = reader.listing(str(FATBIN_FIXTURES / "multi.so"))
    assert len(archs) == 9
    assert [a.name for a in free] == ["sm_75", "sm_80", "sm_90", "sm_90a"]
    # the same with every payload zstd-compressed: looked into when a zstd decompressor exists
    archs, free = reader.listing(str(FATBIN_FIXTURES / "compress_all.so"))
    if checks.decompress_payload(b"", "zstd", 0) is not None or _has_zstd():
        assert [a.name for a in free] == ["sm_75", "sm_80", "sm_90", "sm_90a"]
    assert checks.cubin_has_kernels(b"not an elf") is None


def _has_zstd() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_library_without_kernels_is_not_reported(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    src = tmp_path / "nokernel.cu"
    src.write_text('#include <cuda_runtime.h>\nextern "C" int kiln_count() { int n = 0; '
                   'cudaGetDeviceCount(&n); return n; }\n')
    lib = tmp_path / "lib" / "libkiln_nokernel.so"
    lib.parent.mkdir()
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-o", str(lib), str(src)], check=True, capture_output=True)
    ctx = _ctx(scan=[str(lib.parent)])
    ctx.devices = [H100]
    r = checks._run_check(ctx, _check("arch_extensions"))
    row = next(b for b in r.details["binaries"] if b["binary"] == lib.name)
    assert row["kernel_free"] == ["sm_80"] and "nothing to launch" in row["note"]
    assert lib.name not in r.reason


def test_fatbin_reader_next_to_checks_py_wins(tmp_path: Path) -> None:
    shutil.copy(CHECKS_PY, tmp_path / "checks.py")
    shutil.copy(REPO / "src" / "torchkiln" / "inspect" / "fatbin.py", tmp_path / "fatbin.py")
    reader = checks.find_fatbin_reader(tmp_path, [])
    assert reader is not None and str(tmp_path / "fatbin.py") in reader.describe


def test_entry_adapter_accepts_other_shapes() -> None:
    class E:
        def __init__(self, **kw: Any) -> None:
            self.__dict__.update(kw)

    assert checks._entry_to_arch(E(kind="sass", sm=90, suffix="a")) == checks.Arch("sass", 9, 0, "a")
    assert checks._entry_to_arch(E(kind="ptx", arch="compute_120")) == checks.Arch("ptx", 12, 0, "")
    assert checks._entry_to_arch(E(kind="elf", arch=Capability(8, 6))) == checks.Arch("sass", 8, 6, "")
    assert checks._entry_to_arch(E(kind="ltoir", sm=90)) is None


H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "capability_major": 9,
        "capability_minor": 0}
A100 = {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "capability": "8.0", "capability_major": 8,
        "capability_minor": 0}


def _ctx(**kw: Any) -> checks.Context:
    torch = pytest.importorskip("torch")
    return checks.Context(torch=torch, options=checks.Options(**kw), device="cpu")


def _check(name: str) -> checks.CheckDef:
    return next(c for c in checks.CHECKS if c.name == name)


def test_arch_extensions_names_a_binary_that_cannot_run(tmp_path: Path) -> None:
    # the inspect fixtures: multi.so carries sm_75/sm_80/sm_90 SASS (see its recorded listing)
    for so in FATBIN_FIXTURES.glob("*.so"):
        shutil.copy(so, tmp_path / so.name)
    ctx = _ctx(scan=[str(tmp_path)])
    ctx.devices = [H100, A100]
    r = checks._run_check(ctx, _check("arch_extensions"))
    d = r.details
    assert d["before_first_kernel_launch"] is True
    assert d["with_device_code"] >= 2
    rows = {b["binary"]: b for b in d["binaries"]}
    assert "multi.so" in rows
    assert "fatbin.py" in d["reader"]
    # every binary is judged against both devices; failures name the binary and the device
    for n in d["not_runnable"]:
        assert n["binary"] in r.reason and n["capability"] in ("9.0", "8.0")
    assert (r.status == "fail") == bool(d["not_runnable"])


def test_arch_extensions_fails_for_an_sm80_only_build(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    lib = tmp_path / "libkiln_sm80_only.so"
    subprocess.run(
        [str(REPO / "scripts" / "gpu" / "build_fixture.sh"), str(tmp_path), lib.name, "arch=compute_80,code=sm_80"],
        check=True, capture_output=True,
    )
    ctx = _ctx(scan=[str(tmp_path)])
    ctx.devices = [H100, A100]
    r = checks._run_check(ctx, _check("arch_extensions"))
    assert r.status == "fail"
    assert "libkiln_sm80_only.so is not runnable on device 0 (NVIDIA H100 80GB HBM3, 9.0)" in r.reason
    bad = [n for n in r.details["not_runnable"] if n["binary"] == lib.name]
    assert [n["device"] for n in bad] == [0]  # the A100 runs it
    assert bad[0]["has"] == ["sm_80"]


# -- the checks that launch kernels, run on the CPU ---------------------------------------------------


@pytest.mark.parametrize("name", ["matmul", "conv_cudnn", "sdpa", "autocast"])
def test_numerics_checks_pass_on_the_cpu(name: str) -> None:
    ctx = _ctx()
    r = checks._run_check(ctx, _check(name))
    assert r.status == "pass", (r.reason, r.details)
    assert ctx.kernels_launched
    results = r.details["results"]
    assert results and all(0 <= v["error"] <= v["tolerance"] for v in results.values())


def test_judge_reports_each_failure() -> None:
    status, reason = checks._judge({"fp16": {"error": 0.5, "tolerance": 5e-3},
                                    "bf16": {"error": float("nan"), "tolerance": 2e-2},
                                    "fp32": {"error": 1e-7, "tolerance": 1e-4}})
    assert status == "fail" and "fp16" in reason and "bf16" in reason and "fp32" not in reason


def test_a_crashing_check_is_a_failure_with_its_traceback() -> None:
    def boom(ctx: checks.Context) -> tuple[str, str, dict[str, Any]]:
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    r = checks._run_check(_ctx(), checks.CheckDef("boom", boom, False, "boom"))
    assert r.status == "fail" and r.reason.startswith("RuntimeError: CUDA error: no kernel image")
    assert any("boom" in line for line in r.details["traceback"])


def test_single_gpu_skips_nccl() -> None:
    ctx = _ctx()
    ctx.devices = [H100]
    r = checks._run_check(ctx, _check("nccl"))
    assert r.status == "skip" and "1 GPU visible" in r.reason


@pytest.mark.slow
def test_all_reduce_check_runs_one_process_per_rank_on_the_cpu() -> None:
    # the same spawn / file:// rendezvous / correctness / bandwidth code as on GPUs, through gloo
    ctx = _ctx(nccl_bytes=1 << 20, nccl_iters=3, nccl_timeout=120.0)
    ctx.devices = [H100, A100]
    r = checks._run_check(ctx, _check("nccl"))
    assert r.status == "pass", (r.reason, r.details)
    assert r.details["backend"] == "gloo" and r.details["world_size"] == 2
    assert all(rank["correct"] and rank["max_abs_error"] == 0 for rank in r.details["ranks"])
    assert r.details["busbw_gbs"] == pytest.approx(r.details["algbw_gbs"], rel=0.02)  # 2(n-1)/n = 1


def test_extensions_without_spec_or_packages_skip_and_bad_spec_fails() -> None:
    ctx = _ctx()
    r = checks._run_check(ctx, _check("extensions"))
    assert r.status == "skip"
    ctx = _ctx(spec={"extensions": []})
    assert checks._run_check(ctx, _check("extensions")).reason == "the spec names no extensions"
    ctx = _ctx(spec={"extensions": [{"nom": "x"}]})
    assert checks._run_check(ctx, _check("extensions")).status == "fail"


def test_extensions_report_a_missing_package() -> None:
    ctx = _ctx(spec={"extensions": [{"name": "not-installed-ext", "import": "kiln_not_installed_ext"}]})
    r = checks._run_check(ctx, _check("extensions"))
    assert r.status == "fail" and "ModuleNotFoundError" in r.reason
    assert r.details["extensions"][0]["failure"].startswith("ModuleNotFoundError")


# -- the report ----------------------------------------------------------------------------------------


def test_build_report_status_and_exit_code() -> None:
    ok = checks.CheckResult("a", "pass", "fine", 0.1)
    bad = checks.CheckResult("b", "fail", "broken", 0.2)
    skip = checks.CheckResult("c", "skip", "n/a", 0.0)
    r = checks.build_report([ok, skip], {}, no_gpu=False)
    assert (r["status"], r["exit_code"], r["summary"]) == ("pass", 0, {"pass": 1, "fail": 0, "skip": 1})
    r = checks.build_report([ok, bad], {}, no_gpu=False)
    assert (r["status"], r["exit_code"]) == ("fail", 1)
    r = checks.build_report([ok, bad], {}, no_gpu=True)
    assert (r["status"], r["exit_code"]) == ("no-gpu", 8)
    assert r["schema"] == checks.SCHEMA
    json.dumps(r)
    text = checks.format_text(r | {"environment": {"torch": "2.11.0", "torch_cuda": "13.0", "python": "3.12"}})
    assert "NO CUDA DEVICE" in text and "FAIL  b" in text


def test_unknown_check_names_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        checks.parse_args(["--only", "matmul,bogus"])
    assert e.value.code == checks.EXIT_USAGE
    assert "bogus" in capsys.readouterr().err
    _args, opts = checks.parse_args(["--only", "matmul,sdpa", "--skip", "nccl", "--nccl-mib", "64"])
    assert opts.only == {"matmul", "sdpa"} and opts.skip == {"nccl"} and opts.nccl_bytes == 64 << 20


def test_driver_check_knows_free_threaded_and_forward_compat(monkeypatch: pytest.MonkeyPatch) -> None:
    """#30: an image for "3.13t" run by a GIL interpreter fails; a forward_compat image says whether its
    cuda-compat libraries are in use."""
    monkeypatch.setattr(checks, "read_driver_info", lambda: checks.DriverInfo(version="580.65.06", source="test"))
    monkeypatch.setattr(checks, "sysconfig_gil_disabled", lambda: False)
    status, reason, details = checks.check_driver(_ctx(spec={"cuda": "12.8", "python": "3.13t"}))
    assert status == "fail" and "GIL build" in reason and details["gil_enabled"] is True
    monkeypatch.setattr(checks, "sysconfig_gil_disabled", lambda: True)
    status, reason, details = checks.check_driver(_ctx(spec={"cuda": "12.8", "python": "3.13t"}))
    assert status == "pass" and details["python"].endswith("t")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/compat:/usr/lib")
    status, reason, details = checks.check_driver(_ctx(spec={"cuda": "13.0", "forward_compat": True,
                                                             "min_driver": "535.54.03"}))
    assert details["cuda_compat_in_use"] is True and "cuda-compat libcuda is in use" in reason
