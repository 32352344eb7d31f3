"""The SASS/PTX compatibility rules every other part relies on."""

import pytest

from torchkiln.arch import ArchEntry, Capability, coverage, format_arch_list, parse_arch_list


def cap(s: str) -> Capability:
    return Capability.parse(s)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9.0", (9, 0)), ("90", (9, 0)), ("sm_90", (9, 0)), ("compute_120", (12, 0)), ("sm_100a", (10, 0)),
     ("10.3", (10, 3))],
)
def test_capability_parse(text: str, expected: tuple[int, int]) -> None:
    assert (cap(text).major, cap(text).minor) == expected


@pytest.mark.parametrize("bad", ["", "nine", "9", "9.0.1", "sm_9"])
def test_capability_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        Capability.parse(bad)


def test_sass_runs_on_same_major_newer_minor_only() -> None:
    sm80 = ArchEntry("sass", cap("8.0"))
    assert sm80.runs_on(cap("8.0")) and sm80.runs_on(cap("8.6")) and sm80.runs_on(cap("8.9"))
    assert not sm80.runs_on(cap("9.0"))
    assert not ArchEntry("sass", cap("8.6")).runs_on(cap("8.0"))


def test_arch_specific_sass_runs_only_on_exact_device() -> None:
    sm90a = ArchEntry.parse("sm_90a")
    assert sm90a.runs_on(cap("9.0"))
    assert not ArchEntry.parse("sm_100a").runs_on(cap("10.3"))


def test_ptx_runs_on_any_newer_device() -> None:
    ptx = ArchEntry.parse("compute_90")
    assert ptx.runs_on(cap("9.0")) and ptx.runs_on(cap("12.0"))
    assert not ptx.runs_on(cap("8.9"))


def test_coverage_prefers_exact_sass_then_compatible_then_ptx() -> None:
    entries = parse_arch_list("8.0;8.6;9.0+PTX")
    assert coverage(cap("8.6"), entries).how == "SASS sm_86"
    assert coverage(cap("8.9"), entries).how == "SASS sm_86 (same major, binary compatible)"
    assert coverage(cap("12.0"), entries).how.startswith("PTX compute_90")
    assert not coverage(cap("7.5"), entries).covered
    assert coverage(cap("7.5"), entries).how == "no kernel image"


def test_parse_and_format_arch_list_round_trip() -> None:
    entries = parse_arch_list("7.5 8.0;9.0+PTX")
    assert [e.name for e in entries] == ["sm_75", "sm_80", "sm_90", "compute_90"]
    assert format_arch_list([cap("9.0"), cap("8.0"), cap("9.0")], cap("9.0")) == "8.0;9.0+PTX"
