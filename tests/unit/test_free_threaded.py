"""Free-threaded Python (3.13t, 3.14t) as Python versions of their own: spec, rows, resolve, base, lock, verify."""

import re
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode, LockError, ResolveError, SpecError
from torchkiln.knowledge import load_knowledge, python_key
from torchkiln.render.dockerfile import render_dockerfile
from torchkiln.resolve import resolve
from torchkiln.spec import parse_spec

ROOT = Path(__file__).parents[2]


def plan(**tables):
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())


def fails(**tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


@pytest.mark.parametrize("v", ["3.13t", "3.14t", "3.15t"])
def test_spec_takes_free_threaded_versions(v: str) -> None:
    assert parse_spec({"image": {"name": "a"}, "python": {"version": v}}).python.version == v


@pytest.mark.parametrize("v", ["3.12t", "3.11t", "3.13tt", "t3.13", "3.13T"])
def test_spec_refuses_what_is_no_free_threaded_build(v: str) -> None:
    with pytest.raises(SpecError):
        parse_spec({"image": {"name": "a"}, "python": {"version": v}})


def _pypi_pythons() -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for line in (ROOT / "scripts" / "results" / "pypi_torch_linux_wheels.txt").read_text().splitlines():
        m = re.match(r"torch-([\d.]+)-cp(\d)(\d+)-cp\d+(t?)-\S+_(x86_64|aarch64)\.whl$", line)
        if m:
            out.setdefault((m.group(1), m.group(5)), set()).add(f"{m.group(2)}.{m.group(3)}{m.group(4)}")
    return out


def test_python_rows_match_pypis_file_list_patch_by_patch() -> None:
    """Every patch and platform: the row's Pythons (minus index-only ones) are exactly PyPI's wheel tags,
    free-threaded ones included (cp313t from 2.7.0 to 2.12.0, cp314t from 2.9.0)."""
    kb = load_knowledge()
    pypi = _pypi_pythons()
    checked = 0
    for v in kb.all_patches():
        rel = kb.release_of(v)
        for name, plat in rel.platforms.items():
            if (v, name) not in pypi:
                continue
            want = sorted(set(plat.pythons(v)) - set(plat.python_index_only), key=python_key)
            assert want == sorted(pypi[(v, name)], key=python_key), (v, name)
            checked += 1
    assert checked > 50


def test_3_13t_from_2_6_to_2_12_0_and_dropped_in_2_13() -> None:
    for v in ("2.7.1", "2.8.0", "2.10.0", "2.12.0"):
        p = plan(torch={"version": v}, python={"version": "3.13t"}, gpu={"targets": ["H100"]})
        assert p.python == "3.13t" and p.python_exe == "python3.13t"
        assert any("3.13t" in w and "experimental" in w for w in p.warnings)
    e = fails(torch={"version": "2.13.0"}, python={"version": "3.13t"})
    assert "no wheels for Python 3.13t" in e.message and "2.6.0 to 2.12.0" in e.message
    e = fails(torch={"version": "2.12.1"}, python={"version": "3.13t"})
    assert "up to 2.12.0 only" in e.message
    assert all(f.get("python", {}).get("version", "3.13t") != "3.13" for f in e.fixes)  # stays free-threaded first


def test_2_6_3_13t_is_on_pytorchs_index_only_and_x86_only() -> None:
    p = plan(torch={"version": "2.6.0"}, python={"version": "3.13t"}, gpu={"targets": ["H100"]})
    assert p.torch.requirement == "torch==2.6.0+cu124" and not p.torch.on_default_index
    e = fails(torch={"version": "2.6.0"}, python={"version": "3.13t"}, gpu={"targets": ["GH200"]})
    assert "aarch64 wheels for Python 3.13t" in e.message


def test_3_14t_from_2_9() -> None:
    assert plan(torch={"version": "2.9.0"}, python={"version": "3.14t"}).torch.version == "2.9.0"
    assert plan(torch={"version": "2.14.1"}, python={"version": "3.14t"}).torch.version == "2.14.1"
    e = fails(torch={"version": "2.8.0"}, python={"version": "3.14t"})
    assert "3.14t wheels exist for torch 2.9.0" in e.message


def test_newest_torch_for_3_13t_is_2_12_0() -> None:
    assert plan(python={"version": "3.13t"}).torch.version == "2.12.0"


def test_no_base_brings_a_free_threaded_python_so_uv_installs_it() -> None:
    p = plan(torch={"version": "2.9.1"}, python={"version": "3.14t"})
    assert p.base_image == "debian:bookworm-slim" and p.python_install == "3.14t"
    assert any("free-threaded" in w and "cp314t" in w for w in p.warnings)
    text = render_dockerfile(p)
    assert "uv python install 3.14t" in text and "UV_PYTHON_BIN_DIR=/usr/local/bin" in text
    assert "UV_PYTHON_DOWNLOADS=automatic" in text  # sources.sh says never for every other step
    assert text.index("uv python install") < text.index("FROM base AS torch")  # every stage has it
    assert "venv --python python3.14t" in text
    # a GIL Python keeps the official image and installs nothing
    assert plan(torch={"version": "2.9.1"}).python_install == ""


def test_official_python_image_and_offline_base_have_no_free_threaded_python() -> None:
    for image in ("python:3.13-slim-bookworm", "kiln-base:bookworm"):
        e = fails(torch={"version": "2.8.0"}, python={"version": "3.13t"}, base={"image": image})
        assert "python3.13t" in e.message and "has none" in e.message
        assert e.fixes == ({"base": {"image": ""}},)


def test_apt_has_no_free_threaded_python() -> None:
    e = fails(torch={"version": "2.8.0"}, python={"version": "3.13t"},
              base={"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "python": "apt"})
    assert "no Debian or Ubuntu release packages a free-threaded Python" in e.message


def test_a_base_that_says_it_has_one_is_taken() -> None:
    p = plan(torch={"version": "2.8.0"}, python={"version": "3.13t"}, base={"image": "acme/py313t:1"})
    assert p.base_image == "acme/py313t:1" and p.python_install == ""


def test_free_threaded_extensions_build_from_source() -> None:
    """No prebuilt extension wheel is known for a t ABI: flash-attn is compiled for it."""
    p = plan(torch={"version": "2.9.1", "cuda": "13.0"}, python={"version": "3.14t"}, gpu={"targets": ["H100"]},
             extensions=[{"name": "flash-attn", "version": "2.8.3"}])
    assert p.extensions[0].build == "source"


def test_lock_refuses_free_threaded() -> None:
    from torchkiln.building.locking import UvCompiler

    uv = UvCompiler.__new__(UvCompiler)
    with pytest.raises(LockError, match="free-threaded"):
        uv.compile(["numpy"], python="3.13t", platform="linux/amd64", group="t")


def test_verify_spec_carries_python() -> None:
    from torchkiln.contract import verify_spec
    from torchkiln.verify.runner import spec_from_labels

    p = plan(torch={"version": "2.9.1"}, python={"version": "3.14t"}, gpu={"targets": ["H100"]})
    assert verify_spec(p)["python"] == "3.14t"
    assert spec_from_labels({"io.torchkiln.cuda": "12.8", "io.torchkiln.python": "3.14t"})["python"] == "3.14t"


def test_index_wheels_of_extensions_are_not_taken_for_a_free_threaded_python() -> None:
    gil = plan(torch={"version": "2.9.0"}, gpu={"targets": ["H100"]},
               extensions=[{"name": "xformers", "version": "0.0.33"}])
    ft = plan(torch={"version": "2.9.0", "cuda": "13.0"}, python={"version": "3.13t"}, gpu={"targets": ["H100"]},
              extensions=[{"name": "xformers", "version": "0.0.33"}])
    assert gil.extensions[0].build == "prebuilt"
    assert ft.extensions[0].build == "source"
    assert any("free-threaded" in d.why for d in ft.decisions if d.topic == "extension xformers")
