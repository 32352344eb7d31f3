"""kiln.lock without an engine or an index: the file format, reading uv's pylock.toml, the staleness
and platform checks, the hashed requirement files and the plan of a locked build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchkiln.building.invocation import BuildOptions, plan_build
from torchkiln.building.locking import base_digest, locked_plan, uv_platform
from torchkiln.building.sources import Sources
from torchkiln.engines import DockerEngine, EngineInfo
from torchkiln.errors import ExitCode, LockError
from torchkiln.load import load_plan
from torchkiln.lock import (
    Lock,
    LockedBase,
    LockedWheel,
    check_lock,
    lock_path,
    parse_lock,
    plan_inputs,
    read_lock,
    render_lock,
    stale_reasons,
    wheels_from_pylock,
)
from torchkiln.render.dockerfile import context_files
from torchkiln.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
H1, H2, H3 = "a" * 64, "b" * 64, "c" * 64

PYLOCK = f"""
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "torch"
version = "2.13.0+cpu"
wheels = [{{ url = "file:///opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{H1}" }} }}]

[[packages]]
name = "filelock"
version = "4.2.12"
sdist = {{ url = "https://files.example/filelock-4.2.12.tar.gz", hashes = {{ sha256 = "{H2}" }} }}
wheels = [{{ url = "https://files.example/filelock-4.2.12-py3-none-any.whl", hashes = {{ sha256 = "{H3}" }} }}]
"""


def _cpu_plan():  # type: ignore[no-untyped-def]
    _spec, plan, spec_dir = load_plan(ROOT / "examples" / "cpu.toml")
    return dataclasses.replace(plan, base_image="kiln-base:bookworm"), spec_dir


def _lock(plan, digest: str = "") -> Lock:  # type: ignore[no-untyped-def]
    wheels = [*wheels_from_pylock(PYLOCK, "torch", "linux/amd64"),
              LockedWheel("packages", "linux/amd64", "six", "1.16.0", "file:///opt/pypi/files/six.whl", H2),
              LockedWheel("packages", "linux/amd64", "numpy", "2.3.5", "file:///opt/pypi/files/numpy.whl", H3)]
    return Lock(plan_inputs(plan), LockedBase("kiln-base:bookworm", digest, "sha256:" + H1), tuple(wheels))


def test_uvs_pylock_becomes_one_entry_per_distribution_file() -> None:
    wheels = wheels_from_pylock(PYLOCK, "torch", "linux/amd64")
    assert [(w.name, w.version, w.kind, w.sha256) for w in wheels] == [
        ("torch", "2.13.0+cpu", "wheel", H1), ("filelock", "4.2.12", "wheel", H3), ("filelock", "4.2.12", "sdist", H2),
    ]
    assert wheels[0].url.startswith("file:///opt/wheels/torch-2.13.0+cpu")


def test_the_lock_file_round_trips_and_is_byte_stable(tmp_path: Path) -> None:
    plan, _ = _cpu_plan()
    lock = _lock(plan)
    text = render_lock(lock)
    assert text.startswith("# Written by `kiln lock`")
    assert render_lock(parse_lock(text, tmp_path / "kiln.lock")) == text
    again = parse_lock(text, tmp_path / "kiln.lock")
    assert again.inputs == lock.inputs and again.base == lock.base and set(again.wheels) == set(lock.wheels)
    assert 'platforms = [\n    "linux/amd64",\n]' in text and f'sha256 = "{H1}"' in text


def test_hashed_requirements_list_every_file_of_a_pin() -> None:
    plan, _ = _cpu_plan()
    lock = _lock(plan)
    assert lock.hashed_requirements("torch", "linux/amd64") == (
        f"filelock==4.2.12 --hash=sha256:{H2} --hash=sha256:{H3}",
        f"torch==2.13.0+cpu --hash=sha256:{H1}",
    )
    assert lock.hashed_requirements("torch", "linux/arm64") == ()


@pytest.mark.parametrize(("text", "what"), [
    ("not = [toml", "not TOML"),
    ("lock-version = 2\n", "lock-version 2"),
    ("lock-version = 1\n", "[inputs] or [base] table is missing"),
])
def test_what_is_not_a_lock_is_a_clear_error(tmp_path: Path, text: str, what: str) -> None:
    with pytest.raises(LockError, match=what.replace("[", r"\[").replace("]", r"\]")) as info:
        parse_lock(text, tmp_path / "kiln.lock")
    assert info.value.exit_code == ExitCode.LOCK and "kiln lock" in info.value.hint


def test_a_wheel_without_a_hash_is_refused(tmp_path: Path) -> None:
    plan, _ = _cpu_plan()
    text = render_lock(_lock(plan)).replace(f'sha256 = "{H1}"', 'sha256 = "not-a-hash"', 1)
    with pytest.raises(LockError, match="has no sha256 hash"):
        parse_lock(text, tmp_path / "kiln.lock")


def test_a_missing_lock_names_kiln_lock(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="does not exist") as info:
        read_lock(tmp_path / "kiln.lock")
    assert "kiln lock" in info.value.hint


def test_staleness_names_what_changed(tmp_path: Path) -> None:
    plan, _ = _cpu_plan()
    lock = _lock(plan)
    assert stale_reasons(lock, plan_inputs(plan)) == []
    check_lock(lock, plan_inputs(plan), tmp_path / "kiln.lock")  # answers its own plan
    changed = dataclasses.replace(plan, pip_packages=("six==1.17.0", "numpy==2.3.5"), python="3.12",
                                  base_image="python:3.12-slim")
    reasons = stale_reasons(lock, plan_inputs(changed))
    assert reasons == [
        "the base image is python:3.12-slim, the lock's is kiln-base:bookworm",
        "Python is 3.12, the lock's is 3.11",
        "the packages requirements changed (+six==1.17.0, -six==1.16.0)",
    ]
    with pytest.raises(LockError, match="is stale: since it was written") as info:
        check_lock(lock, plan_inputs(changed), tmp_path / "kiln.lock")
    assert "kiln lock" in info.value.hint and info.value.exit_code == ExitCode.LOCK


def test_a_lock_for_another_platform_says_so(tmp_path: Path) -> None:
    plan, _ = _cpu_plan()
    lock = _lock(plan)
    with pytest.raises(LockError, match="written for linux/amd64, and the spec builds linux/arm64"):
        check_lock(lock, plan_inputs(dataclasses.replace(plan, platform="linux/arm64")), tmp_path / "kiln.lock")
    with pytest.raises(LockError, match="cannot lock for the platform"):
        uv_platform("linux/s390x")
    assert uv_platform("linux/arm64") == "aarch64-manylinux_2_28"


def test_base_digest_is_the_one_of_the_bases_own_repository() -> None:
    d1, d2 = "sha256:" + H1, "sha256:" + H2
    assert base_digest("python:3.11-slim", [f"docker.io/library/python@{d1}"]) == d1
    assert base_digest("127.0.0.1:5000/team/base:1", [f"other/base@{d2}", f"127.0.0.1:5000/team/base@{d1}"]) == d1
    assert base_digest("kiln-base:bookworm", [f"127.0.0.1:5000/kiln-test/base@{d1}"]) == ""  # pushed under another name
    assert base_digest("kiln-base:bookworm", []) == ""


def test_lock_path_is_beside_the_spec(tmp_path: Path) -> None:
    assert lock_path(tmp_path / "cpu.toml") == tmp_path / "cpu.lock"
    assert lock_path(tmp_path) == tmp_path / "kiln.lock"


def test_a_locked_plan_builds_from_the_digest_with_hash_checked_installs(tmp_path: Path) -> None:
    plan, spec_dir = _cpu_plan()
    spec = tmp_path / "cpu.toml"
    spec.write_text((ROOT / "examples" / "cpu.toml").read_text())
    digest = "sha256:" + H3
    (tmp_path / "cpu.lock").write_text(render_lock(_lock(plan, digest)))
    locked, _lock_read = locked_plan(plan, spec)
    assert locked.base_image == f"kiln-base@{digest}"
    files = context_files(locked)
    assert files[".kiln/requirements-torch.txt"] == (
        f"filelock==4.2.12 --hash=sha256:{H2} --hash=sha256:{H3}\ntorch==2.13.0+cpu --hash=sha256:{H1}\n")
    assert f"six==1.16.0 --hash=sha256:{H2}\n" in files[".kiln/requirements.txt"]
    assert files["Dockerfile"].count("--require-hashes") == 2
    assert f"FROM kiln-base@{digest} AS base" in files["Dockerfile"]
    assert "--require-hashes" not in context_files(plan)["Dockerfile"]  # unlocked builds are unchanged

    # a base in the local store only: FROM its tag, and the build checks its image id first
    (tmp_path / "cpu.lock").write_text(render_lock(_lock(plan, "")))
    local, _ = locked_plan(plan, spec)
    engine = DockerEngine(EngineInfo("docker", "/usr/bin/docker", "20.10.24", "20.10.24", "buildkit"), Runner())
    inv = plan_build(local, spec_dir, BuildOptions(context_dir=tmp_path / "ctx"), engine, Sources(), cwd=tmp_path)
    assert inv.base_image == "kiln-base:bookworm" and inv.base_id == "sha256:" + H1
    assert inv.lock == str(tmp_path / "cpu.lock") and inv.to_dict()["lock"] == inv.lock

    # the spec moved on: refused before anything is built
    spec.write_text(spec.read_text().replace('"six==1.16.0", ', ""))
    _s, moved, _d = load_plan(spec)
    with pytest.raises(LockError, match=r"stale.*-six==1.16.0"):
        locked_plan(dataclasses.replace(moved, base_image="kiln-base:bookworm"), spec)
