"""The knowledge base is data with a source on every row; these tests keep it that way."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from importlib import resources

import pytest

from torchkiln.arch import Capability
from torchkiln.errors import ResolveError
from torchkiln.knowledge import load_knowledge

FILES = ["torch.toml", "cuda.toml", "gpus.toml", "ngc.toml", "extensions.toml"]


def _rows(name: str) -> list[dict]:
    data = tomllib.loads(resources.files("torchkiln.knowledge").joinpath(name).read_text())
    rows = []
    for value in data.values():
        if isinstance(value, list):
            rows += value
        elif isinstance(value, dict):
            rows += [v for v in value.values() if isinstance(v, dict)]
    return rows


@pytest.mark.parametrize("name", FILES)
def test_every_row_cites_a_known_source(name: str) -> None:
    kb = load_knowledge()
    rows = [r for r in _rows(name) if "targets" not in r or "source" in r]
    assert rows
    for row in rows:
        assert row.get("source"), f"{name}: row without a source: {row}"
        first = row["source"].replace(",", " ").split()[0]
        assert first in kb.sources, f"{name}: source {first!r} is not defined in sources.toml"


def test_covers_torch_2_0_through_2_14() -> None:
    kb = load_knowledge()
    series = [r.series for r in kb.releases]
    assert series[0] == "2.0" and "2.14" in series
    assert "2.14.1" in kb.all_patches()


def test_measured_rows_say_so() -> None:
    kb = load_knowledge()
    row = kb.arch_row("2.14", "13.0")
    assert row is not None and "MEASURED" in row.source
    assert not any(e.kind == "ptx" for e in row.entries)  # measured: the 2.14.1 cu130 wheel has no PTX


def test_gpu_lookup_by_name_and_capability() -> None:
    kb = load_knowledge()
    assert kb.lookup_gpu("H100") == Capability(9, 0)
    assert kb.lookup_gpu("NVIDIA GeForce RTX 4090") == Capability(8, 9)
    assert kb.lookup_gpu("a10g") == Capability(8, 6)
    assert kb.lookup_gpu("12.0") == Capability(12, 0)
    with pytest.raises(ResolveError, match="Did you mean 'H100'"):
        kb.lookup_gpu("H10O")


def test_driver_floors_follow_minor_version_compatibility() -> None:
    kb = load_knowledge()
    assert kb.driver_floor("12.4")[0] == "525.60.13"
    assert kb.driver_floor("13.0")[0].startswith("580")
