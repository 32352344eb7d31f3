"""kiln.toml validation: strict, and every error names the file, the table and the key."""

from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, SpecError
from torchkiln.spec import load_spec, parse_spec


def test_minimal_spec_gets_defaults() -> None:
    s = parse_spec({"image": {"name": "acme/trainer"}})
    assert s.image.tag == "latest" and s.python.version == "3.11" and s.torch.cuda == "auto"
    assert s.app.user == "kiln" and s.gpu.ptx is True


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    p = tmp_path / "kiln.toml"
    p.write_text('[image]\nname = "a"\n[torch]\nverison = "2.5.1"\n')
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(p) in e.value.message
    assert "[torch]" in e.value.message and "'verison'" in e.value.message and "'version'" in e.value.message
    assert e.value.exit_code == ExitCode.SPEC


def test_unknown_table_is_an_error() -> None:
    with pytest.raises(SpecError, match="unknown table 'pakages'.*Did you mean 'packages'"):
        parse_spec({"image": {"name": "a"}, "pakages": {}})


def test_extension_errors_name_the_entry() -> None:
    with pytest.raises(SpecError, match=r"'vesion' in \[extensions\[2\]\]"):
        parse_spec({"image": {"name": "a"}, "extensions": [{"name": "x"}, {"name": "y", "vesion": "1"}]})


@pytest.mark.parametrize(
    ("table", "value", "needle"),
    [
        ({"torch": {"version": "two"}}, None, "PEP 440"),
        ({"torch": {"cuda": "12"}}, None, "CUDA variant"),
        ({"python": {"version": "3"}}, None, "Python minor version"),
        ({"gpu": {"min_driver": "latest"}}, None, "driver version"),
        ({"packages": {"pip": ["torch==2.1"]}}, None, "managed by torchkiln"),
        ({"packages": {"pip": ["not a req!!"]}}, None, "not a valid requirement"),
        ({"packages": {"apt": ["Bad Name"]}}, None, "Debian package"),
        ({"app": {"copy": ["../secret"]}}, None, "inside the spec's folder"),
        ({"app": {"workdir": "rel"}}, None, "absolute path"),
        ({"torch": {"packages": ["numpy"]}}, None, "companion"),
    ],
)
def test_bad_values_are_explained(table: dict, value: None, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        parse_spec({"image": {"name": "a"}, **table})


def test_cuda_variant_spellings_normalise() -> None:
    assert parse_spec({"image": {"name": "a"}, "torch": {"cuda": "cu124"}}).torch.cuda == "12.4"
    assert parse_spec({"image": {"name": "a"}, "torch": {"cuda": "130"}}).torch.cuda == "13.0"


def test_missing_file_invalid_toml_and_binary(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[image\nname=")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(SpecError, match="UTF-8"):
        load_spec(binary)


def test_folder_with_kiln_toml(tmp_path: Path) -> None:
    (tmp_path / "kiln.toml").write_text('[image]\nname = "acme/x"\n')
    assert load_spec(tmp_path).image.name == "acme/x"
