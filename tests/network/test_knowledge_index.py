"""The scheduled check: torchkiln's built-in rows against what PyPI serves today.

Run on a schedule (and before a release) with ``pytest -m network tests/network``; skipped otherwise
(see conftest.py). It fails when:

- PyPI has a torch release or patch the built-in rows lack: ``kiln knowledge update`` learns it into
  a throw-away overlay here, and what it learned is the row to add (and the failure prints it);
- a built-in row disagrees with the index: the Python versions each platform's wheels exist for, the
  variant PyPI ships, and (for the newest series, measured by range reads, about 1 GB) the compiled
  architectures of its wheels;
- a companion row disagrees: a paired torchvision/torchaudio that PyPI does not have, or one PyPI has
  for a torch release whose row says there is none.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from torchkiln.knowledge import load_knowledge, python_key
from torchkiln.knowledge.learn import (
    COMPANION_WHEEL,
    PYPI,
    WHEEL,
    measure_url,
    project_files,
    required_torch,
    torch_groups,
    update_overlay,
)

pytestmark = pytest.mark.network
ROOT = Path(__file__).parents[2]


def _check_script():
    spec = importlib.util.spec_from_file_location("check_knowledge", ROOT / "scripts" / "check_knowledge.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_knowledge"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def torch_files():
    return project_files(PYPI, "torch")


def test_pypi_has_nothing_the_rows_lack(tmp_path: Path) -> None:
    report = update_overlay([PYPI], path=tmp_path / "overlay.json")
    assert report.learned == [], (
        "PyPI has torch wheels the built-in rows do not describe; add rows for them (measured as "
        "scripts/check_knowledge.py --pypi --series X.Y does):\n"
        + "\n".join(f"  {w.version}{'+' + w.label if w.label else ''} {w.platform}: cuda {w.cuda}, "
                    f"SASS {w.arch_list or '-'}, Python {', '.join(w.python)} ({w.url} sha256={w.sha256})"
                    for w in report.learned))


def test_python_versions_and_patches_agree_with_the_index(torch_files) -> None:
    kb = load_knowledge()
    groups = torch_groups(torch_files, PYPI)
    problems = []
    for rel in kb.releases:
        for platform, plat in rel.platforms.items():
            on_index = {v for (v, label, p) in groups
                        if label == "" and p == platform and ".".join(v.split(".")[:2]) == rel.series}
            if not on_index:
                continue
            missing = sorted(on_index - set(rel.patches), key=Version)
            if missing:
                problems.append(f"{rel.series} {platform}: PyPI has {', '.join(missing)}, the row lists {rel.patches}")
            newest = max(on_index, key=Version)
            g = groups[(newest, "", platform)]
            pythons = sorted([*g.pythons, *(f"{p}t" for p in g.freethreaded)], key=python_key)
            known = sorted(set(plat.pythons(newest)) - set(plat.python_index_only), key=python_key)
            if pythons != known:
                problems.append(f"{newest} {platform}: PyPI's wheels are for Python {pythons}, the row says {known} "
                                "(python minus python_index_only)")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_newest_series_wheels_agree_with_their_rows(torch_files) -> None:
    ck = _check_script()
    kb = load_knowledge()
    newest = kb.releases[-1]
    groups = torch_groups(torch_files, PYPI)
    problems = []
    for platform in newest.platforms:
        versions = [v for (v, label, p) in groups if label == "" and p == platform and v in newest.patches]
        if not versions:
            continue
        g = groups[(max(versions, key=Version), "", platform)]
        f = g.pick()
        m = measure_url(f.url, f.filename, f.size)
        pythons = sorted([*g.pythons, *(f"{p}t" for p in g.freethreaded)], key=python_key)
        problems += [f"{f.filename}: {p}" for p in ck.compare(kb, g.version, platform, m, pythons)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", ["torchvision", "torchaudio"])
def test_companion_rows_agree_with_the_index(package: str) -> None:
    kb = load_knowledge()
    files = project_files(PYPI, package)
    on_index = {m.group("version") for f in files if (m := COMPANION_WHEEL.match(f.filename)) and not f.yanked}
    rows = [c for c in kb.companions if c.package == package]
    problems = [f"{c.package} {c.version} (for torch {c.torch}) is not on PyPI" for c in rows
                if c.version and c.version not in on_index]
    # a companion newer than every row's: which torch does it pin? A row saying "none" for it is wrong.
    paired = {c.version for c in rows if c.version}
    newest_row = max((Version(v) for v in paired), default=Version("0"))
    none_for = {c.torch for c in rows if not c.version}
    for version in sorted(on_index, key=Version):
        if Version(version) <= newest_row:
            continue
        wheel = next(f for f in files if (m := COMPANION_WHEEL.match(f.filename)) and m.group("version") == version
                     and m.group("machine") == "x86_64")
        torch = (required_torch(wheel.url, wheel.size) or version).split("+")[0]
        if torch in none_for or torch not in kb.all_patches():
            problems.append(f"PyPI has {package} {version} for torch {torch}, but the rows do not pair it")
    assert not problems, "\n".join(problems)


def test_wheel_name_pattern_still_matches_pypi(torch_files) -> None:
    """A renamed wheel tag (a new manylinux policy) would make every other check pass vacuously."""
    linux = [f.filename for f in torch_files if "manylinux" in f.filename and "-2.1" in f.filename]
    assert linux and all(WHEEL.match(n) for n in linux)


@pytest.mark.slow
def test_update_relearns_the_newest_series_as_its_rows_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the newest series' built-in rows, `kiln knowledge update` learns it from PyPI (range reads,
    ~1 GB) and the learned rows equal the built-in ones: the learning path works on the real index."""
    import dataclasses

    import torchkiln.knowledge as knowledge
    from torchkiln.knowledge import overlay

    real = load_knowledge()
    series = real.releases[-1].series
    cut = dataclasses.replace(real, releases=real.releases[:-1],
                              arch_rows=tuple(a for a in real.arch_rows if a.series != series),
                              companions=tuple(c for c in real.companions if c.torch not in real.releases[-1].patches))
    monkeypatch.setattr(knowledge, "load_knowledge", lambda: cut)
    monkeypatch.setattr(overlay, "load_knowledge", lambda: cut)
    path = tmp_path / "overlay.json"
    report = update_overlay([PYPI], path=path)
    assert report.written and {w.series for w in report.learned} == {series}
    kb = overlay.apply_overlay(cut, overlay.read_overlay(path), path)
    newest = real.releases[-1]
    learned = kb.release_of(newest.patches[-1])
    assert learned is not None and learned.patches == newest.patches
    for name, plat in newest.platforms.items():
        got = learned.on(name)
        assert got is not None and got.default_cuda == plat.default_cuda
        assert list(got.python) == sorted(set(plat.pythons(newest.patches[-1])) - set(plat.python_index_only),
                                          key=python_key)
        if plat.default_cuda != "cpu":
            assert kb.arch_row(series, plat.default_cuda, name).arch_list == real.arch_row(  # type: ignore[union-attr]
                series, plat.default_cuda, name).arch_list  # type: ignore[union-attr]
