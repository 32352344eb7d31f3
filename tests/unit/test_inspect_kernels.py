"""Kernel-less device code (nvcc's device-link stub, cuFFTW) must not be reported as "no kernel image"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchkiln.arch import Capability
from torchkiln.cli import main
from torchkiln.inspect.coverage import Target, binary_coverage
from torchkiln.inspect.fatbin import list_entries
from torchkiln.inspect.kernels import entry_has_kernels, has_kernels

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"


def test_device_link_stub_has_no_kernels() -> None:
    path = FIXTURES / "stub.so"
    entries = list_entries(path)
    assert [e.arch for e in entries] == ["sm_75", "sm_75"]
    assert has_kernels(path, entries) is False


@pytest.mark.parametrize("name", ["multi.so", "compress_all.so", "nocompress.o", "ptx_only.so", "debug.o"])
def test_real_modules_have_kernels(name: str) -> None:
    path = FIXTURES / name
    assert has_kernels(path, list_entries(path)) is True


def test_each_container_is_judged_on_its_own() -> None:
    path = FIXTURES / "multi.so"
    data = path.read_bytes()
    entries = list_entries(path)
    by_container = {
        c: {entry_has_kernels(lambda o, n: data[o : o + n], e) for e in entries if e.container == c} for c in (0, 1)
    }
    assert by_container == {0: {False}, 1: {True}}  # nvlink's stub, then the real module


def test_unknown_compression_module_means_assume_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_zstd(name: str, *args: object, **kw: object) -> object:
        if name == "zstandard":
            raise ImportError(name)
        return real_import(name, *args, **kw)  # type: ignore[arg-type]

    path = FIXTURES / "compress_all.so"  # every cubin zstd-compressed
    stub = [e for e in list_entries(path) if e.container == 0]
    data = path.read_bytes()
    monkeypatch.setattr(builtins, "__import__", no_zstd)
    assert entry_has_kernels(lambda o, n: data[o : o + n], stub[0]) is None
    assert has_kernels(path, stub) is True


def test_coverage_of_a_kernel_less_binary() -> None:
    targets = [Target("H100", Capability(9, 0)), Target("T4", Capability(7, 5))]
    res = binary_coverage(list_entries(FIXTURES / "stub.so"), targets, kernels=False)
    assert [(r.how, r.runs, r.entry) for r in res] == [("no-kernels", True, None), ("sass", True, "sm_75")]


def test_cli_does_not_flag_a_stub(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", str(FIXTURES / "stub.so"), "-t", "H100", "--json", "--check"])
    out, _ = capsys.readouterr()
    assert code == 0
    (b,) = json.loads(out)["binaries"]
    assert b["failing"] == [] and b["coverage"]["9.0"]["how"] == "no-kernels"
