"""Build-failure diagnosis on captured real build logs (see tests/fixtures/buildlogs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.diagnose import Diagnosis, diagnose, format_diagnoses

LOGS = Path(__file__).parents[1] / "fixtures" / "buildlogs"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _only(name: str) -> Diagnosis:
    found = diagnose(_log(name))
    assert [d.kind for d in found] == [found[0].kind], [d.title for d in found]
    return found[0]


def test_oom_killed_cc1plus_suggests_fewer_jobs() -> None:
    d = _only("oom-cc1plus-memory-700m.log")
    assert d.kind == "oom" and "cc1plus was killed" in d.title
    assert "c++: fatal error: Killed signal terminated program cc1plus" in d.lines
    assert any(line.startswith("FAILED:") for line in d.lines)  # the failing command comes with it
    assert "MAX_JOBS" in d.hint and "NVCC_THREADS" in d.hint


def test_oom_killed_nvcc_names_the_jobs_it_ran_with() -> None:
    d = _only("oom-nvcc-memory-1200m.log")
    assert d.kind == "oom" and "nvcc was killed" in d.title and "MAX_JOBS=1" in d.title
    assert "FAILED: [code=137] /tmp/src/build/temp.linux-x86_64-cpython-311/csrc/all.o" in d.lines
    assert "Killed" in d.lines
    assert any("/usr/local/cuda/bin/nvcc" in line for line in d.lines)


def test_oom_hint_halves_the_jobs_the_builder_chose() -> None:
    # the builder stages log the MAX_JOBS they computed (kiln_jobs); a real OOM log behind such a line
    text = "kiln: MAX_JOBS=8 (cores 16, available memory 40 GiB, 5 GiB per job)\n" + _log("oom-cc1plus-memory-700m.log")
    (d,) = diagnose(text)
    assert "while MAX_JOBS=8" in d.title and "MAX_JOBS=4" in d.hint


@pytest.mark.parametrize("name", ["isolation-pip-buildkit.log", "isolation-uv-buildkit.log"])
def test_no_module_named_torch_is_build_isolation(name: str) -> None:
    d = _only(name)
    assert d.kind == "build-isolation" and "while a package was being built" in d.title
    assert "ModuleNotFoundError: No module named 'torch'" in d.lines
    assert "--no-build-isolation" in d.hint
    # BuildKit's "#5 3.571 " prefixes are gone, the line numbers point into the raw log
    raw = _log(name).splitlines()
    n = d.lines.index("ModuleNotFoundError: No module named 'torch'")
    assert raw[d.line_numbers[n] - 1].startswith("#") and raw[d.line_numbers[n] - 1].endswith(d.lines[n])


def test_unsupported_arch_in_an_extension_build() -> None:
    d = _only("arch-compute70-cuda13.log")
    assert d.kind == "unsupported-arch" and "compute capability 7.0" in d.title
    assert "nvcc fatal   : Unsupported gpu architecture 'compute_70'" in d.lines
    assert any(line.startswith("FAILED:") for line in d.lines)
    assert "[gpu] targets" in d.hint and "7.5" in d.hint


def test_unsupported_arch_from_bare_nvcc() -> None:
    d = _only("nvcc-sm35-cuda13.log")
    assert d.kind == "unsupported-arch" and "3.5" in d.title
    assert d.lines == ("nvcc fatal   : Unsupported gpu architecture 'sm_35'",) and d.line_numbers == (2,)


def test_cuda_mismatch_from_torchkilns_check_and_torchs_warning() -> None:
    d = _only("mismatch-nvcc132-torch130.log")
    assert d.kind == "cuda-mismatch"
    assert d.title == "CUDA toolkit mismatch: nvcc is CUDA 13.2, torch was built with CUDA 13.0"
    assert any(line.startswith("kiln: CUDA toolkit mismatch") for line in d.lines)
    assert any("has a minor version mismatch" in line for line in d.lines)
    assert "13.0" in d.hint


@pytest.mark.parametrize("text, have, want", [
    # torch/utils/cpp_extension.py CUDA_MISMATCH_MESSAGE (its two string pieces join without a space)
    ("RuntimeError: \nThe detected CUDA version (12.8) mismatches the version that was used to compilePyTorch (13.0). "
     "Please make sure to use the same CUDA versions.", "12.8", "13.0"),
    # apex setup.py check_cuda_torch_binary_vs_bare_metal
    ("RuntimeError: Cuda extensions are being compiled with a version of Cuda that does not match the version used "
     "to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda 12.4.\nCuda compilation tools, "
     "release 12.1, V12.1.105", "12.1", "12.4"),
])
def test_cuda_mismatch_messages_of_torch_and_apex(text: str, have: str, want: str) -> None:
    (d,) = diagnose(text)
    assert d.kind == "cuda-mismatch" and d.title == f"CUDA toolkit mismatch: nvcc is CUDA {have}, torch was built " \
        f"with CUDA {want}"


def test_a_clean_build_gives_no_diagnosis() -> None:
    text = _log("success-my-op.log")
    assert "No module named 'numpy'" in text and "built my_op-0.1.0" in text
    assert diagnose(text) == []
    assert format_diagnoses([]) == ""


def test_other_recognised_failures() -> None:
    kinds = {d.kind for d in diagnose(
        "csrc/x.cpp:1:10: fatal error: Python.h: No such file or directory\n"
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n"
        "  Getting requirements to build wheel: started\n"
        "ModuleNotFoundError: No module named 'packaging'\n")}
    assert kinds == {"python-headers", "no-nvcc", "build-requirement"}


def test_format_shows_lines_with_numbers_and_the_fix() -> None:
    (d,) = diagnose(_log("nvcc-sm35-cuda13.log"))
    text = d.format()
    assert text.splitlines()[1] == "       2 | nvcc fatal   : Unsupported gpu architecture 'sm_35'"
    assert text.splitlines()[-1].startswith("fix: ")
    assert d.to_dict()["kind"] == "unsupported-arch"


def test_several_failures_come_in_log_order() -> None:
    text = _log("arch-compute70-cuda13.log") + "\n" + _log("oom-cc1plus-memory-700m.log")
    assert [d.kind for d in diagnose(text)] == ["unsupported-arch", "oom"]
