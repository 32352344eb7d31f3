"""Every fix an error suggests resolves when applied: checked mechanically over many failing specs."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.errors import ResolveError, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import _patched, resolve
from torchkiln.spec import parse_spec

KB = load_knowledge()
# a concrete assignment in a hint (`cuda = "12.6"`), not a placeholder (`ref = "<tag or commit>"`)
ASSIGNMENT = re.compile(r'\b\w+ = "(?P<value>[^"<>.][^"<>]*)"')

GPUS = ["A100", "H100", "V100", "P100", "T4", "L4", "RTX 4090", "RTX 5090", "B200", "K80", "8.0", "12.0"]
spec_docs = st.fixed_dictionaries(
    {"image": st.just({"name": "acme/fuzz"})},
    optional={
        "torch": st.fixed_dictionaries({}, optional={
            "version": st.sampled_from(["", "2.5.1", "2.7.1", ">=2.6,<2.8", "2.14.1", "2.0.1", ">=2.9"]),
            "cuda": st.sampled_from(["auto", "cpu", "11.8", "12.1", "12.4", "12.6", "12.8", "13.0"]),
        }),
        "python": st.fixed_dictionaries({"version": st.sampled_from(["3.9", "3.10", "3.11", "3.12", "3.13"])}),
        "gpu": st.fixed_dictionaries({}, optional={
            "targets": st.lists(st.sampled_from(GPUS), max_size=3, unique=True),
            "min_driver": st.sampled_from(["470.57.02", "525.60.13", "535.104", "550.54.15", "570.86", "580.65.06"]),
            "ptx": st.booleans(),
        }),
        "extensions": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["flash-attn", "apex", "deepspeed"])}),
                               max_size=1),
    },
)


def check_fixes(doc: dict) -> str | None:
    """Resolve ``doc``; when it fails, apply each suggested fix and resolve again. Returns the outcome."""
    try:
        spec = parse_spec(doc)
    except SpecError:
        return "spec"
    try:
        resolve(spec, KB)
        return "ok"
    except ResolveError as e:
        offered = [m.group("value") for m in ASSIGNMENT.finditer(e.hint or "")]
        if offered:
            assert e.fixes, f"the hint offers {offered} but the error carries no checked fix: {e.hint}"
        for fix in e.fixes:
            patched = _patched(spec, fix)
            assert patched is not None, fix
            resolve(patched, KB)  # raises (and fails the test) if a suggested fix does not resolve
        return "fixed" if e.fixes else "no-fix"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_docs)
def test_every_suggested_fix_resolves(doc: dict) -> None:
    check_fixes(doc)


def test_flash_attn_with_an_old_driver_names_it_and_suggests_what_resolves() -> None:
    doc = {"image": {"name": "acme/fa"}, "torch": {"cuda": "auto"},
           "gpu": {"targets": ["A100", "H100"], "min_driver": "535.104"}, "extensions": [{"name": "flash-attn"}]}
    spec = parse_spec(doc)
    try:
        resolve(spec, KB)
    except ResolveError as e:
        assert "flash-attn" in e.message
        assert e.fixes and 'cuda = "13.0"' not in (e.hint or "")  # 13.0 needs a driver of the R580 branch
        for fix in e.fixes:
            plan = resolve(_patched(spec, fix), KB)
            assert plan.min_driver is not None and tuple(map(int, plan.min_driver.split("."))) <= (535, 104)
    else:
        raise AssertionError("flash-attn on CUDA 12 without a compiler must not resolve")


def test_known_failures_offer_checked_fixes() -> None:
    cases = [
        {"image": {"name": "a"}, "torch": {"version": "2.5.1"}, "gpu": {"targets": ["RTX 5090"]}},
        {"image": {"name": "a"}, "torch": {"version": "2.14.1", "cuda": "13.0"}, "gpu": {"targets": ["V100"]}},
        {"image": {"name": "a"}, "torch": {"cuda": "13.0"}, "gpu": {"min_driver": "535.104"}},
        {"image": {"name": "a"}, "gpu": {"targets": ["V100"]}, "extensions": [{"name": "flash-attn"}]},
    ]
    for doc in cases:
        assert check_fixes(doc) == "fixed", doc


def test_a_python_the_torch_lacks_keeps_the_torch_and_its_cuda() -> None:
    """The nearest fix moves Python only: a CPU image is never offered a CUDA build, nor 12.6 a 13.2."""
    for cuda in ("cpu", "12.6"):
        doc = {"image": {"name": "a"}, "python": {"version": "3.7"}, "torch": {"version": "2.13.0", "cuda": cuda}}
        try:
            resolve(parse_spec(doc), KB)
        except ResolveError as e:
            assert e.fixes, e.hint
            first = e.fixes[0]
            assert first["torch"] == {"version": "2.13.0", "cuda": cuda}, e.hint
            assert first["python"]["version"] == "3.10", e.hint
            assert all(f.get("torch", {}).get("cuda", "cpu") == "cpu" for f in e.fixes) or cuda != "cpu", e.hint
        else:
            raise AssertionError("torch 2.13.0 has no Python 3.7 wheels")
