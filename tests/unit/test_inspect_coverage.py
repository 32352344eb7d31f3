"""GPU coverage of fat-binary entries, per binary and per package."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.arch import Capability
from torchkiln.errors import ResolveError
from torchkiln.inspect.coverage import (
    Target,
    binary_coverage,
    default_targets,
    parse_targets,
    summarize_packages,
)
from torchkiln.inspect.fatbin import list_entries
from torchkiln.knowledge import load_knowledge

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"


def t(cc: str, label: str | None = None) -> Target:
    return Target(label or cc, Capability.parse(cc))


def how(path: str, *ccs: str) -> list[tuple[str | None, str]]:
    return [(r.entry, r.how) for r in binary_coverage(list_entries(FIXTURES / path), [t(c) for c in ccs])]


def test_exact_compatible_and_ptx() -> None:
    # multi.so: sm_75 sm_80 sm_90 sm_90a + compute_90
    assert how("multi.so", "7.5", "8.6", "9.0", "10.0", "7.0") == [
        ("sm_75", "sass"),
        ("sm_80", "sass-compatible"),  # same major, newer minor
        ("sm_90a", "sass"),  # the arch-specific cubin is preferred on exactly 9.0
        ("compute_90", "ptx-jit"),  # newer major: only PTX helps
        (None, "none"),  # older than everything
    ]


def test_family_and_arch_specific_cubins() -> None:
    # family.o: compute_90a, sm_100f, compute_100f, sm_103a, sm_120f
    assert how("family.o", "10.3", "10.0", "12.1", "9.0", "11.0") == [
        ("sm_103a", "sass"),
        ("sm_100f", "sass"),
        ("sm_120f", "sass-compatible"),
        ("compute_90a", "ptx-jit"),
        # neither family-10 PTX nor 9.0a PTX is forward-compatible to another major
        (None, "none"),
    ]


def test_ptx_only_and_no_device_code() -> None:
    assert how("ptx_only.so", "8.0", "9.0", "12.0", "7.5") == [
        ("compute_80", "ptx-jit"),
        ("compute_80", "ptx-jit"),
        ("compute_120", "ptx-jit"),
        (None, "none"),
    ]
    assert how("plain.so", "9.0") == [(None, "none")]


def test_per_package_summary() -> None:
    targets = [t("7.5"), t("12.0")]
    rows = []
    for pkg, name in (("a", "multi.so"), ("a", "rdc.so"), (None, "ptx_only.so")):
        entries = list_entries(FIXTURES / name)
        rows.append((pkg, "1.0" if pkg else None, f"/lib/{name}", entries, binary_coverage(entries, targets)))
    summary = {p.package: p for p in summarize_packages(rows, targets)}
    assert list(summary) == ["a", None]
    a = summary["a"]
    assert a.binaries == 2 and a.version == "1.0"
    assert a.failing == {"7.5": ("/lib/rdc.so",), "12.0": ("/lib/rdc.so",)}  # rdc.so: sm_80 only
    assert a.archs == ("sm_75", "sm_80", "sm_90", "sm_90a", "compute_90")
    assert summary[None].failing == {"7.5": ("/lib/ptx_only.so",), "12.0": ()}
    assert a.to_dict()["targets"] == {
        "7.5": {"binaries_ok": 1, "failing": ["/lib/rdc.so"]},
        "12.0": {"binaries_ok": 1, "failing": ["/lib/rdc.so"]},
    }


def test_parse_targets_names_capabilities_and_commas() -> None:
    k = load_knowledge()
    got = parse_targets(["H100,8.6", "sm_120", "H200"], k)
    assert [(x.label, x.key) for x in got] == [("H100", "9.0"), ("8.6", "8.6"), ("sm_120", "12.0")]
    assert str(got[0]) == "H100 (9.0)" and str(got[1]) == "8.6"


def test_unknown_gpu_is_a_resolve_error_with_suggestions() -> None:
    with pytest.raises(ResolveError, match="H100"):
        parse_targets(["H1000"], load_knowledge())


def test_default_targets_from_spec_or_standard_list() -> None:
    k = load_knowledge()
    assert [x.key for x in default_targets(k, ["A10"])] == ["8.6"]
    standard = default_targets(k)
    assert {x.capability for x in standard} == set(k.default_targets)


def test_suffixed_ptx_is_not_forward_compatible() -> None:
    from torchkiln.arch import ArchEntry

    fam = ArchEntry.parse("compute_100f")
    assert fam.runs_on(Capability(10, 0)) and fam.runs_on(Capability(10, 3))
    assert not fam.runs_on(Capability(11, 0)) and not fam.runs_on(Capability(12, 0))
    spec = ArchEntry.parse("compute_90a")
    assert spec.runs_on(Capability(9, 0)) and not spec.runs_on(Capability(10, 0))
    assert ArchEntry.parse("compute_90").runs_on(Capability(12, 1))


def test_embedded_entries_fill_only_the_gaps() -> None:
    from torchkiln.inspect.fatbin import read_embedded

    path = FIXTURES / "embedded.so"
    targets = [t("7.5"), t("8.6"), t("9.0"), t("12.0"), t("7.0")]
    res = binary_coverage(list_entries(path), targets, read_embedded(path))
    assert [(r.entry, r.how, r.embedded) for r in res] == [
        ("sm_75", "sass", False),  # the regular entry wins where it runs
        ("sm_80", "sass-compatible", True),
        ("sm_90", "sass", True),
        ("compute_90", "ptx-jit", True),
        (None, "none", False),
    ]
