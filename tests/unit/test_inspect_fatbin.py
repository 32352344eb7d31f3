"""The fat-binary reader against cuobjdump's recorded listings of nvcc-built fixtures.

The fixtures and the listings come from tests/fixtures/fatbin/build.sh (nvcc 13.0, cuobjdump from
the nvidia-cuda-cuobjdump wheel); neither tool is needed here.
"""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.inspect import fatbin
from torchkiln.inspect.fatbin import FatbinError, NotElfError, cuobjdump_lines, list_entries, read_fatbins

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fatbin"
LISTED = sorted(p for p in FIXTURES.iterdir() if p.with_name(p.name + ".txt").exists() and p.is_file())


def reader(data: bytes) -> fatbin.ReadAt:
    return lambda off, n: data[off : off + n]


def recorded(path: Path) -> list[str]:
    return [line.rstrip("\n") for line in path.read_text().splitlines() if line.startswith(("ELF file", "PTX file"))]


def test_every_fixture_has_a_listing() -> None:
    names = {p.name for p in LISTED}
    assert {
        "multi.so",
        "compress_all.so",
        "lz4.o",
        "nocompress.o",
        "family.o",
        "ptx_only.so",
        "rdc.o",
        "rdc.so",
        "debug.o",
        "app",
        "plain.so",
    } <= names


@pytest.mark.parametrize("path", LISTED, ids=lambda p: p.name)
def test_listing_matches_cuobjdump(path: Path) -> None:
    ours = list(cuobjdump_lines(list_entries(path), path.name))
    assert ours == recorded(path.with_name(path.name + ".txt"))


def test_all_sections_matches_cuobjdump_all() -> None:
    path = FIXTURES / "rdc.so"
    ours = list(cuobjdump_lines(list_entries(path, all_sections=True), path.name))
    assert ours == recorded(FIXTURES / "rdc.so.all.txt")
    entries = list_entries(path, all_sections=True)
    assert [e.section for e in entries] == [".nv_fatbin"] + ["__nv_relfatbin"] * 4


def test_relocatable_object_lists_relfatbin_when_no_nv_fatbin() -> None:
    listing = read_fatbins(FIXTURES / "rdc.o")
    assert listing.sections == ("__nv_relfatbin",)
    assert listing.elf_type == 1  # ET_REL
    assert [(e.kind, e.arch) for e in listing.entries] == [("ptx", "compute_80"), ("sass", "sm_80")]


def test_stripped_section_headers_fall_back_to_a_validated_scan() -> None:
    listing = read_fatbins(FIXTURES / "stripped.so")
    assert listing.method == "scan"
    assert list(cuobjdump_lines(listing.entries, "multi.so")) == recorded(FIXTURES / "multi.so.txt")
    assert all(e.section == "" for e in listing.entries)


def test_no_device_code() -> None:
    listing = read_fatbins(FIXTURES / "plain.so")
    assert listing.entries == () and listing.method == "sections" and listing.elf_type == 3


def test_compression_modes() -> None:
    multi = list_entries(FIXTURES / "multi.so")
    # nvcc 13 by default compresses PTX only
    assert {(e.kind, e.compression) for e in multi} == {("sass", None), ("ptx", "zstd")}
    assert all(e.compressed and e.compression == "zstd" for e in list_entries(FIXTURES / "compress_all.so"))
    assert all(e.compression == "lz4" for e in list_entries(FIXTURES / "lz4.o"))
    assert not any(e.compressed for e in list_entries(FIXTURES / "nocompress.o"))
    for e in list_entries(FIXTURES / "compress_all.so"):
        assert 0 < e.compressed_size <= e.payload_size < e.uncompressed_size


def test_arch_specific_and_family_targets() -> None:
    entries = list_entries(FIXTURES / "family.o")
    assert [e.arch for e in entries] == ["compute_90a", "sm_100f", "compute_100f", "sm_103a", "sm_120f"]
    # cuobjdump hides a family cubin's "f", not a family PTX's
    assert [e.cuobjdump_arch for e in entries] == ["sm_90a", "sm_100", "sm_100f", "sm_103a", "sm_120"]


def test_multi_so_entries_and_containers() -> None:
    entries = list_entries(FIXTURES / "multi.so")
    assert [e.arch for e in entries] == [
        "sm_75", "sm_80", "sm_90", "sm_90a",  # nvlink's device-link container
        "sm_75", "sm_80", "compute_90", "sm_90", "sm_90a",
    ]  # fmt: skip
    assert [e.container for e in entries] == [0] * 4 + [1] * 5
    ptx = entries[6]
    assert ptx.code_version == (9, 0) and ptx.kind == "ptx"
    assert ptx.to_dict()["kind"] == "ptx" and ptx.to_dict()["arch"] == "compute_90"
    assert ptx.to_dict()["compressed"] is True


def test_debug_entries_carry_their_source_name() -> None:
    entries = list_entries(FIXTURES / "debug.o")
    assert {e.identifier for e in entries} == {"src/saxpy.cu"}
    assert all(e.debug for e in entries)


def test_elf_sections_agree_with_pyelftools() -> None:
    from elftools.elf.elffile import ELFFile

    for path in LISTED:
        with open(path, "rb") as f:
            ref = [(s.name, s["sh_offset"], s["sh_size"]) for s in ELFFile(f).iter_sections()]
            data = path.read_bytes()
            ours = fatbin.elf_sections(reader(data), len(data))
        assert ours is not None
        assert [(s.name, s.offset, s.size) for s in ours] == ref, path.name


def test_every_source_kind_gives_the_same_listing() -> None:
    path = FIXTURES / "multi.so"
    data = path.read_bytes()
    expected = list_entries(path)

    class Unseekable(io.RawIOBase):
        def __init__(self) -> None:
            self._b = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return False

        def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
            return self._b.readinto(buf)

    assert list_entries(str(path)) == expected
    assert list_entries(data) == expected
    assert list_entries(bytearray(data)) == expected
    assert list_entries(io.BytesIO(data)) == expected
    assert list_entries(Unseekable()) == expected  # type: ignore[arg-type]


def test_not_elf(tmp_path: Path) -> None:
    fake = tmp_path / "libfake.so"
    fake.write_text("INPUT(-lfoo)\n")  # a GNU ld script named .so, as some distributions ship
    with pytest.raises(NotElfError):
        list_entries(fake)
    with pytest.raises(NotElfError):
        list_entries(b"")


@pytest.mark.parametrize("cut", [0.05, 0.5, 0.9, 0.999])
def test_truncated_file_is_a_clear_error(cut: float) -> None:
    data = (FIXTURES / "multi.so").read_bytes()
    with pytest.raises(FatbinError, match="truncated|past the end|does not fit|no fat binary|claims"):
        list_entries(data[: int(len(data) * cut)])


@pytest.mark.parametrize("n", [6, 52, 60, 63])
def test_short_elf_header_is_a_clear_error(n: int) -> None:
    # an ELF64 header cut between 52 and 64 bytes raised struct.error (found by the long fuzz run)
    data = (FIXTURES / "multi.so").read_bytes()[:n]
    with pytest.raises(FatbinError, match="truncated"):
        fatbin.elf_sections(reader(data), len(data))


def test_absurd_architecture_number_is_a_clear_error() -> None:
    data = bytearray((FIXTURES / "multi.so").read_bytes())
    first = list_entries(bytes(data))[0]
    sm_at = first.offset + 28  # the entry header's sm field (kind, version, header size, payload, ...)
    assert int.from_bytes(data[sm_at : sm_at + 4], "little") == first.sm
    data[sm_at : sm_at + 4] = (4266763536).to_bytes(4, "little")
    with pytest.raises(FatbinError, match="not a GPU architecture"):
        list_entries(bytes(data))


def test_corrupt_container_in_a_section_is_an_error() -> None:
    data = bytearray((FIXTURES / "multi.so").read_bytes())
    table = fatbin.elf_sections(lambda off, n: bytes(data[off : off + n]), len(data))
    assert table is not None
    sec = next(s for s in table if s.name == ".nv_fatbin")
    data[sec.offset : sec.offset + 4] = b"XXXX"
    with pytest.raises(FatbinError, match="no fat binary container"):
        list_entries(bytes(data))


def test_scan_ignores_false_magic_hits() -> None:
    junk = b"\x50\xed\x55\xba" + b"\xff" * 60 + b"\x50\xed\x55\xba\x01\x00\x10\x00" + b"\x00" * 8
    assert fatbin.scan_containers(lambda off, n: junk[off : off + n], len(junk)) == []


def test_scan_finds_a_container_split_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (FIXTURES / "stripped.so").read_bytes()
    expected = list_entries(data)
    for chunk in (4096, 4097, 65536 + 3):
        monkeypatch.setattr(fatbin, "_SCAN_CHUNK", chunk)
        assert list_entries(data) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 56295), st.integers(0, 255)), min_size=1, max_size=8))
def test_damaged_files_never_crash(patches: list[tuple[int, int]]) -> None:
    data = bytearray((FIXTURES / "multi.so").read_bytes())
    for off, value in patches:
        data[off % len(data)] = value
    try:
        list_entries(bytes(data))
    except FatbinError:
        pass


def test_module_is_stdlib_only() -> None:
    tree = ast.parse(Path(fatbin.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_module_runs_alone_without_site_packages(tmp_path: Path) -> None:
    shutil.copy(fatbin.__file__, tmp_path / "fatbin.py")
    code = "import sys; sys.path.insert(0, '.'); import fatbin; print(len(fatbin.list_entries(sys.argv[1])))"
    # -S: no site-packages (no pyelftools, no torchkiln); -I: isolated from the environment
    out = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code, str(FIXTURES / "multi.so")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "9"


def test_embedded_fat_binaries_in_other_sections() -> None:
    path = FIXTURES / "embedded.so"
    assert [e.arch for e in list_entries(path)] == ["sm_75", "sm_75"]  # what cuobjdump lists
    embedded = fatbin.read_embedded(path)
    assert [(e.kind, e.arch, e.section) for e in embedded] == [
        ("sass", "sm_80", ".kernels"),
        ("ptx", "compute_90", ".kernels"),
        ("sass", "sm_90", ".kernels"),
    ]
    data = path.read_bytes()
    assert all(data[e.offset : e.offset + 2] in (b"\x01\x00", b"\x02\x00") for e in embedded)  # entry kinds
    assert fatbin.read_embedded(FIXTURES / "multi.so") == ()
    assert fatbin.read_embedded(FIXTURES / "stripped.so") == ()  # a scan already saw everything
