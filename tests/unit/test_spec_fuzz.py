"""Property: whatever a user writes into kiln.toml, torchkiln answers with a plan or a typed error."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.errors import KilnError, ResolveError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.spec import load_spec, parse_spec

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.toml"))
BASE = tomllib.loads((Path(__file__).parents[2] / "examples" / "cu124-a100.toml").read_text())

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["2.5.1", ">=2.6,<2.8", "12.4", "cu130", "auto", "cpu", "H100", "V100", "8.0", "sm_90",
                     "RTX 5090", "580.65.06", "535", "3.11", "3.8", "flash-attn", "latest", "", "root"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)
keys = st.sampled_from(["image", "python", "torch", "gpu", "packages", "extensions", "app", "base", "sources",
                        "name", "tag", "version", "cuda", "targets", "min_driver", "ptx", "pip", "apt", "copy",
                        "command", "user", "workdir", "image", "path", "env", "bogus"])


def _check(data: object) -> None:
    try:
        spec = parse_spec(data)  # type: ignore[arg-type]
        resolve(spec, load_knowledge())
    except (SpecError, ResolveError) as e:
        assert e.message and e.hint
    # anything else propagates and fails the test


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=6))
def test_random_documents_give_a_plan_or_a_typed_error(doc: dict) -> None:
    _check(doc)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(BASE)), st.data())
def test_mangled_example_tables(table: str, data: st.DataObject) -> None:
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    if isinstance(doc[table], dict) and doc[table]:
        key = data.draw(st.sampled_from(sorted(doc[table])))
        doc[table][key] = data.draw(values)
    else:
        doc[table] = data.draw(values)
    _check(doc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(EXAMPLES), st.integers(0, 2000), st.text(max_size=6))
def test_corrupted_files(tmp_path_factory, path: Path, at: int, junk: str) -> None:
    text = path.read_text()
    at = at % (len(text) + 1)
    p = tmp_path_factory.mktemp("fuzz") / "kiln.toml"
    p.write_text(text[:at] + junk + text[at:])
    try:
        resolve(load_spec(p), load_knowledge())
    except KilnError as e:
        assert e.message
