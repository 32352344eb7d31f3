"""Property: whatever kiln.toml holds, every command answers with a documented exit code, an
`error:` and a `fix:` line when it fails, never a traceback, and never a credential planted in the spec.

``KILN_FUZZ_EXAMPLES=10000`` runs the long version (the default keeps the suite under a minute).
"""

import os
import re
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.cli import main
from torchkiln.errors import ExitCode

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
SECRET = "PLANTEDs3cr3t"
TOKEN = "ghp_" + "Planted0123456789abcdefghijklmnopqrstu"
EXAMPLES_N = int(os.environ.get("KILN_FUZZ_EXAMPLES", "80"))
#: the exit codes the README documents for these commands
DOCUMENTED = {int(c) for c in ExitCode}
OUTCOMES: Counter[str] = Counter()

credential_urls = st.sampled_from([
    f"https://user:{SECRET}@pypi.example.com/simple",
    f"https://{TOKEN}@github.com/acme/repo",
    f"git+https://oauth2:{SECRET}@gitlab.example.com/acme/pkg.git",
    f"mypkg @ https://bob:{SECRET}@files.example.com/mypkg-1.0-py3-none-any.whl",
    f"http://{SECRET}:{SECRET}@127.0.0.1:3141/root/pypi/+simple/",
])
plain = st.sampled_from(['"2.5.1"', '">=2.6,<2.8"', '"12.4"', '"13.0"', '"auto"', '"cpu"', '"H100"', '"V100"',
                         '"8.0"', '"535.104"', '"580.65.06"', '"3.11"', '"3.8"', '"flash-attn"', '""', "true", "42",
                         "-1", "1e400", "nan", '"root"', '"a/b"', '"latest"', '"host"', '"git"', "{}", "[]",
                         '["A100", "H100"]', '["flash-attn"]', "2024-01-01T00:00:00Z", '"\\u0000"'])
values = st.one_of(
    plain,
    credential_urls.map(lambda u: f'"{u}"'),
    credential_urls.map(lambda u: f'["{u}"]'),
    st.integers(1, 1500).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 1500).map(lambda n: "{a=" * n + "1" + "}" * n),
    st.text(max_size=12).map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
)
tables = st.sampled_from(["image", "python", "torch", "gpu", "packages", "app", "base", "sources", "bogus"])
keys = st.sampled_from(["name", "tag", "version", "cuda", "packages", "targets", "min_driver", "ptx", "pip", "apt",
                        "copy", "command", "user", "workdir", "image", "python", "index_url", "extra_index_urls",
                        "find_links", "torch_index", "network", "source", "git", "ref", "env", "precompile", "x"])
# edits a user might make (known keys, plausible values), so that many specs validate and then resolve
# or fail to resolve (exit 4), beside the mangled ones
plausible = st.one_of(
    st.tuples(st.just("torch"), st.just("version"), st.sampled_from(['"2.5.1"', '"2.7.1"', '">=2.6,<2.8"', '""',
                                                                     '"2.14.1"', '"2.0.1"'])),
    st.tuples(st.just("torch"), st.just("cuda"), st.sampled_from(['"auto"', '"cpu"', '"11.8"', '"12.4"', '"12.6"',
                                                                  '"12.8"', '"13.0"'])),
    st.tuples(st.just("gpu"), st.just("targets"), st.sampled_from(['["A100"]', '["V100", "H100"]', '["RTX 5090"]',
                                                                   '["T4"]', '["K80"]', '[]', '["P100", "B200"]'])),
    st.tuples(st.just("gpu"), st.just("min_driver"), st.sampled_from(['"470.57.02"', '"535.104"', '"580.65.06"'])),
    st.tuples(st.just("python"), st.just("version"), st.sampled_from(['"3.9"', '"3.10"', '"3.12"', '"3.13"'])),
    st.tuples(st.just("sources"), st.sampled_from(["index_url", "torch_index"]),
              credential_urls.map(lambda u: f'"{u}"')),
    st.tuples(st.just("sources"), st.just("extra_index_urls"), credential_urls.map(lambda u: f'["{u}"]')),
    st.tuples(st.just("packages"), st.just("pip"), credential_urls.map(lambda u: f'["{u}"]')),
)
edits = st.lists(st.one_of(plausible, plausible, plausible, st.tuples(tables, keys, values)), max_size=3)
junk = st.tuples(st.integers(0, 3000), st.sampled_from([""] * 12 + ["[", "]", "=", '"', "\n[torch]\n", "{", "\x00"]))


def _spec_text(example: Path, edits: list[tuple[str, str, str]], junk: tuple[int, str]) -> str:
    text = example.read_text()
    for table, key, value in edits:
        line = f"{key} = {value}\n"
        header = f"[{table}]\n"
        if header in text:
            # replace the key in that table when present, else add it right under the header
            start = text.index(header) + len(header)
            end = text.find("\n[", start)
            end = len(text) if end < 0 else end + 1
            body = text[start:end]
            body, n = re.subn(rf"(?m)^{re.escape(key)}\s*=.*\n", line.replace("\\", "\\\\"), body, count=1)
            text = text[:start] + (body if n else line + body) + text[end:]
        else:
            text += f"\n{header}{line}"
    at, chars = junk
    at %= len(text) + 1
    return text[:at] + chars + text[at:]


COMMANDS = (["resolve"], ["resolve", "--json"], ["explain"], ["explain", "--json"], ["render", "--stdout"])


def _check(capsys, path: Path) -> None:
    for command in COMMANDS:
        code = main([*command, str(path)])
        out, err = capsys.readouterr()
        OUTCOMES[f"{' '.join(command)} -> {code}"] += 1
        assert code in DOCUMENTED, (command, code, err)
        assert "Traceback" not in out + err, err
        assert SECRET not in out + err and TOKEN not in out + err, (command, out + err)
        if code != 0:
            assert re.search(r"(?m)^error: \S", err), (command, code, err)
            assert re.search(r"(?m)^fix: \S", err), (command, code, err)


@settings(max_examples=EXAMPLES_N, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(EXAMPLES), edits, junk)
def test_mangled_specs_never_trace_back_or_leak(capsys, tmp_path_factory, example: Path,
                                                 edits: list[tuple[str, str, str]], junk: tuple[int, str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "kiln.toml"
    path.write_text(_spec_text(example, edits, junk), encoding="utf-8")
    _check(capsys, path)


def test_fuzz_outcomes_are_varied() -> None:
    """The property above reached both successes and each kind of spec failure (run after it)."""
    if not OUTCOMES:  # run alone
        return
    print("\n".join(f"{n:7d}  {k}" for k, n in sorted(OUTCOMES.items())))  # shown with -s
    codes = {k.rsplit(" ", 1)[1] for k in OUTCOMES}
    assert {"0", "3", "4"} <= codes, OUTCOMES
