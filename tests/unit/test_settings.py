"""Settings that stick (torchkiln.settings, `kiln config`): precedence flags > env > project > user > defaults."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from torchkiln.building.sources import resolve_sources
from torchkiln.cli import main
from torchkiln.settings import (
    SettingsError,
    UserSettings,
    config_path,
    effective,
    load_user,
    set_values,
    user_source_layer,
    write_user,
)
from torchkiln.spec import parse_spec

ROOT = Path(__file__).parents[2]
SPEC = parse_spec({"image": {"name": "a"}, "base": {"image": "acme/base:1"},
                   "sources": {"index_url": "https://spec.example/simple"}})
BARE = parse_spec({"image": {"name": "a"}})
USER = UserSettings.model_validate({"base": "kiln-base:bookworm", "engine": "podman", "sources_from_pip": True,
                                    "sources": {"index_url": "https://user.example/simple"}})


def _eff(**kw):
    kw.setdefault("env", {})
    kw.setdefault("user", USER)
    kw.setdefault("user_file", Path("/cfg/config.toml"))
    return effective(**kw)


def test_each_layer_wins_over_the_ones_below() -> None:
    s = _eff(flags={"base": "flag/base:1"}, env={"KILN_BASE": "env/base:1"}, spec=SPEC)
    assert (s["base"].value, s["base"].origin, s["base"].where) == ("flag/base:1", "flag", "--base")
    s = _eff(env={"KILN_BASE": "env/base:1"}, spec=SPEC)
    assert (s["base"].value, s["base"].origin, s["base"].where) == ("env/base:1", "env", "KILN_BASE")
    s = _eff(spec=SPEC, spec_origin="kiln.toml")
    assert (s["base"].value, s["base"].origin, s["base"].where) == ("acme/base:1", "project", "kiln.toml [base] image")
    s = _eff(spec=BARE)
    assert (s["base"].value, s["base"].origin, s["base"].where) == ("kiln-base:bookworm", "user", "/cfg/config.toml")
    s = _eff(spec=BARE, user=UserSettings())
    assert (s["base"].value, s["base"].origin) == (None, "default")


def test_base_override_leaves_a_project_base_alone() -> None:
    # the project outranks the user file: a spec that names its base (an NGC image with its own torch) keeps it
    assert _eff(spec=SPEC).base_override is None
    assert _eff(spec=BARE).base_override == "kiln-base:bookworm"
    assert _eff(spec=SPEC, env={"KILN_BASE": "x/y:1"}).base_override == "x/y:1"
    assert _eff(spec=SPEC, flags={"base": "x/z:1"}).base_override == "x/z:1"


def test_engine_bool_and_list_keys_from_env_and_flags() -> None:
    s = _eff()
    assert (s.engine, s["engine"].origin, s.sources_from_pip) == ("podman", "user", True)
    s = _eff(env={"KILN_ENGINE": "docker", "KILN_SOURCES_FROM_PIP": "0", "KILN_BUILDERS": "a, b c"})
    assert (s.engine, s.sources_from_pip, s.builders) == ("docker", False, ["a", "b", "c"])
    assert s["builders"].origin == "env"
    # a flag given as False (by a caller) is a flag; None is not given
    assert _eff(flags={"sources_from_pip": False})["sources_from_pip"].origin == "flag"
    assert _eff(flags={"sources_from_pip": None})["sources_from_pip"].origin == "user"


def test_sources_show_their_layer() -> None:
    s = _eff(spec=SPEC)
    assert s["sources.index_url"].origin == "project"
    assert _eff(spec=BARE)["sources.index_url"].value == "https://user.example/simple"
    assert _eff(spec=BARE, env={"KILN_INDEX_URL": "https://env.example/simple"})["sources.index_url"].origin == "env"


def test_user_sources_sit_between_the_spec_and_pip(tmp_path: Path) -> None:
    s = _eff(spec=BARE, user_file=tmp_path / "config.toml")
    layer = user_source_layer(s)
    got = resolve_sources(env={}, plan_sources=SPEC.sources, spec_dir=tmp_path, user=layer)
    assert got.index_url == "https://spec.example/simple" and dict(got.origins)["index_url"] == "spec"
    got = resolve_sources(env={}, plan_sources=BARE.sources, spec_dir=tmp_path, user=layer)
    assert got.index_url == "https://user.example/simple" and dict(got.origins)["index_url"] == "user config"
    got = resolve_sources(env={"KILN_INDEX_URL": "https://env.example/simple"}, plan_sources=BARE.sources,
                          spec_dir=tmp_path, user=layer)
    assert dict(got.origins)["index_url"] == "env"


def test_config_path_follows_kiln_config_then_xdg(tmp_path: Path) -> None:
    assert config_path({"KILN_CONFIG": str(tmp_path / "c.toml")}) == tmp_path / "c.toml"
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "torchkiln" / "config.toml"
    assert config_path({"XDG_CONFIG_HOME": "relative"}) == Path.home() / ".config" / "torchkiln" / "config.toml"


def test_tests_never_read_the_real_user_file() -> None:
    assert Path(os.environ["KILN_CONFIG"]) != Path.home() / ".config" / "torchkiln" / "config.toml"
    assert load_user()[0] == UserSettings()


def test_bad_files_and_values_are_clear_errors(tmp_path: Path) -> None:
    p = tmp_path / "config.toml"
    p.write_text('bsae = "x"\n')
    with pytest.raises(SettingsError, match="unknown key 'bsae' .did you mean 'base'"):
        load_user(p)
    p.write_text('engine = "dokcer"\n')
    with pytest.raises(SettingsError, match="'engine'"):
        load_user(p)
    p.write_text("engine = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_user(p)
    with pytest.raises(SettingsError, match="KILN_SOURCES_FROM_PIP"):
        effective(env={"KILN_SOURCES_FROM_PIP": "maybe"}, user=UserSettings(), user_file=p)
    with pytest.raises(SettingsError, match="KILN_ENGINE"):
        effective(env={"KILN_ENGINE": "rkt"}, user=UserSettings(), user_file=p)
    with pytest.raises(SettingsError, match="unknown setting 'bse'. Did you mean 'base'"):
        set_values(UserSettings(), "bse", ["x"], "kiln config set bse")


def test_set_unset_and_write_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "config.toml"
    s = set_values(UserSettings(), "sources.find_links", ["/w1,/w2", "/w3"], "set")
    s = set_values(s, "sources_from_pip", ["yes"], "set")
    write_user(s, p)
    assert oct(p.stat().st_mode & 0o777) == "0o600"
    loaded, _ = load_user(p)
    assert loaded.sources.find_links == ["/w1", "/w2", "/w3"] and loaded.sources_from_pip is True
    loaded = set_values(loaded, "sources.find_links", None, "unset")
    assert loaded.sources.find_links == [] and [x.name for x in tmp_path.joinpath("sub").iterdir()] == ["config.toml"]


def test_kiln_config_cli_prints_every_setting_and_its_origin(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["config", "set", "base", "kiln-base:bookworm"]) == 0
    assert main(["config", "set", "sources_from_pip", "true"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("KILN_ENGINE", "docker")
    assert main(["config", "--json", "--spec", str(ROOT / "examples" / "ngc.toml")]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {s["key"]: s for s in data["settings"]}
    assert by["base"]["origin"] == "project" and by["engine"]["origin"] == "env"
    assert by["sources_from_pip"] == {"key": "sources_from_pip", "value": True, "origin": "user",
                                      "where": os.environ["KILN_CONFIG"]}
    assert by["registry"]["origin"] == "default"
    assert main(["config", "--spec", str(ROOT / "examples" / "cpu.toml")]) == 0
    out = capsys.readouterr().out
    assert "kiln-base:bookworm" in out and "user" in out
    assert main(["config", "set", "engine", "rkt"]) == 3
    assert "'engine'" in capsys.readouterr().err
    assert main(["config", "unset", "base"]) == 0
    assert load_user()[0].base is None


def test_render_and_lock_take_the_base_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "set", "base", "kiln-base:bookworm"]) == 0
    capsys.readouterr()
    assert main(["render", str(ROOT / "examples" / "cpu.toml"), "--stdout"]) == 0
    assert "FROM kiln-base:bookworm AS base" in capsys.readouterr().out
    # a spec whose [base] image is set keeps it (the project outranks the user file)
    assert main(["render", str(ROOT / "examples" / "ngc.toml"), "--stdout"]) == 0
    assert "FROM nvcr.io/nvidia/pytorch:25.12-py3" in capsys.readouterr().out
    # kiln resolve and explain show the plan as kiln build builds it, and say where the base came from
    assert main(["resolve", str(ROOT / "examples" / "cpu.toml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["base_image"] == "kiln-base:bookworm"
    assert main(["explain", str(ROOT / "examples" / "cpu.toml"), "--json"]) == 0
    decisions = {d["topic"]: d for d in json.loads(capsys.readouterr().out)["decisions"]}
    assert decisions["base image (settings)"]["source"] == os.environ["KILN_CONFIG"]


def test_push_registry_setting() -> None:
    from torchkiln.cli.push import registry_ref

    assert registry_ref("acme/t:1", "localhost:5000") == "localhost:5000/acme/t:1"
    assert registry_ref("acme/t:1", "ghcr.io/org/") == "ghcr.io/org/acme/t:1"
    assert registry_ref("reg.example:5000/acme/t:1", "localhost:5000") is None
    assert registry_ref("acme/t:1", None) is None


def test_a_lock_stale_only_by_its_base_names_both_ways_out(tmp_path: Path) -> None:
    """The quick start's loop: a lock written on kiln-base:bookworm, a build without it. The fix offered
    must not lead back to the same error (`kiln lock SPEC` alone would lock an unpullable base)."""
    import dataclasses

    from torchkiln.errors import LockError
    from torchkiln.load import load_plan
    from torchkiln.lock import Lock, LockedBase, check_lock, plan_inputs

    _s, plan, _d = load_plan(ROOT / "examples" / "cpu.toml")
    locked_on = dataclasses.replace(plan, base_image="kiln-base:bookworm")
    lock = Lock(plan_inputs(locked_on), LockedBase("kiln-base:bookworm", "", "sha256:" + "0" * 64), ())
    with pytest.raises(LockError) as info:
        check_lock(lock, plan_inputs(plan), tmp_path / "cpu.lock")
    hint = info.value.hint
    assert "--locked --base kiln-base:bookworm" in hint and "kiln config set base kiln-base:bookworm" in hint
