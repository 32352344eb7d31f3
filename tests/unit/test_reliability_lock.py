"""Issue #24, items 3 and 6: a tampered, unreadable or special kiln.lock is refused before building (exit 14)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchkiln.building.locking import locked_plan
from torchkiln.cli import main
from torchkiln.errors import ExitCode, LockError
from torchkiln.load import load_plan
from torchkiln.lock import Lock, LockedBase, LockedWheel, plan_inputs, read_lock, render_lock

ROOT = Path(__file__).resolve().parents[2]
H1, H2, H3, H4 = "a" * 64, "b" * 64, "c" * 64, "d" * 64


def _spec(tmp_path: Path) -> tuple[Path, object]:
    spec = tmp_path / "cpu.toml"
    shutil.copy(ROOT / "examples" / "cpu.toml", spec)
    (tmp_path / "apps").mkdir()
    shutil.copy(ROOT / "examples" / "apps" / "cpu_app.py", tmp_path / "apps")
    _s, plan, _d = load_plan(spec)
    return spec, dataclasses.replace(plan, base_image="kiln-base:bookworm")


def _lock(plan) -> Lock:  # type: ignore[no-untyped-def]
    p = "linux/amd64"
    wheels = (LockedWheel("torch", p, "torch", "2.13.0+cpu", "file:///w/torch.whl", H1),
              LockedWheel("packages", p, "six", "1.16.0", "file:///w/six-1.16.0.whl", H2),
              LockedWheel("packages", p, "numpy", "2.3.5", "file:///w/numpy.whl", H3))
    return Lock(plan_inputs(plan), LockedBase("kiln-base:bookworm", "", "sha256:" + H1), wheels)


def _numpy_entry(text: str) -> str:
    start = text.index("[[wheels]]", text.index('name = "numpy"') - 200)
    end = text.find("[[wheels]]", start + 1)
    return text[start:end if end > 0 else len(text)]


TAMPER = {
    "swap a version": lambda t: t.replace('version = "1.16.0"', 'version = "1.17.0"').replace(
        "six-1.16.0.whl", "six-1.17.0.whl").replace(H2, H4),
    "drop numpy": lambda t: t.replace(_numpy_entry(t), ""),
    "add idna": lambda t: t + (f'\n[[wheels]]\ngroup = "packages"\nplatform = "linux/amd64"\nname = "idna"\n'
                               f'version = "3.10"\nkind = "wheel"\nurl = "file:///w/idna.whl"\nsha256 = "{H4}"\n'),
    "change a hash": lambda t: t.replace(H3, H4),
    "change the base id": lambda t: t.replace(f'id = "sha256:{H1}"', f'id = "sha256:{H4}"'),
}


def test_an_untouched_lock_is_accepted(tmp_path: Path) -> None:
    spec, plan = _spec(tmp_path)
    (tmp_path / "cpu.lock").write_text(render_lock(_lock(plan)))
    locked, _ = locked_plan(plan, spec)
    assert locked.locked is not None


@pytest.mark.parametrize("how", sorted(TAMPER))
def test_a_tampered_lock_is_refused_before_building(how: str, tmp_path: Path) -> None:
    spec, plan = _spec(tmp_path)
    text = render_lock(_lock(plan))
    tampered = TAMPER[how](text)
    assert tampered != text
    (tmp_path / "cpu.lock").write_text(tampered)
    with pytest.raises(LockError) as info:
        locked_plan(plan, spec)
    assert info.value.exit_code == ExitCode.LOCK
    assert "kiln lock" in info.value.hint
    assert "edited" in info.value.message or "does not match" in info.value.message


def test_a_tampered_lock_exits_14_from_the_cli_before_any_engine(tmp_path: Path, capsys) -> None:
    spec, plan = _spec(tmp_path)
    (tmp_path / "cpu.lock").write_text(TAMPER["swap a version"](render_lock(_lock(plan))))
    code = main(["build", str(spec), "--locked", "--dry-run", "--base", "kiln-base:bookworm"])
    err = capsys.readouterr().err
    assert code == 14, err
    assert "fix:" in err and "kiln lock" in err and "Traceback" not in err


def test_a_lock_without_integrity_from_an_older_torchkiln_is_refused(tmp_path: Path) -> None:
    spec, plan = _spec(tmp_path)
    text = render_lock(_lock(plan))
    start = text.index("[integrity]")
    end = text.index("\n\n", start) + 2
    (tmp_path / "cpu.lock").write_text(text[:start] + text[end:])
    with pytest.raises(LockError, match="integrity"):
        locked_plan(plan, spec)


# -- item 6: what is not a file ------------------------------------------------------------------------


def test_invalid_utf8_in_the_lock_is_exit_14_and_kiln_lock_can_still_rewrite_it(tmp_path: Path) -> None:
    spec, plan = _spec(tmp_path)
    (tmp_path / "cpu.lock").write_bytes(b"lock-version = 1\n\xff\xfe garbage\n")
    with pytest.raises(LockError, match="not UTF-8"):
        locked_plan(plan, spec)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
def test_a_lock_that_is_not_a_regular_file_is_refused_at_once(kind: str, tmp_path: Path) -> None:
    spec, plan = _spec(tmp_path)
    path = tmp_path / "cpu.lock"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    result: list[BaseException | None] = []

    def read() -> None:
        try:
            read_lock(path)
            result.append(None)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            result.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert result, "reading the lock hung"
    assert isinstance(result[0], LockError) and result[0].exit_code == ExitCode.LOCK


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "invalid-utf8"])
def test_a_spec_that_is_not_a_text_file_is_a_spec_error(kind: str, tmp_path: Path, capsys) -> None:
    spec = tmp_path / "kiln.toml"
    if kind == "dev-zero":
        spec.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(spec)
    else:
        spec.write_bytes(b'[image]\nname = "\xff"\n')
    code = main(["resolve", str(spec)])
    err = capsys.readouterr().err
    assert code == ExitCode.SPEC, err
    assert "fix:" in err and "Traceback" not in err


# -- fuzzing: whatever a lock holds, reading it is a lock or a LockError ---------------------------------

_edit = st.tuples(st.sampled_from(["cut", "set", "insert"]), st.floats(0, 1), st.binary(min_size=1, max_size=12))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(_edit, min_size=1, max_size=4))
def test_a_mangled_lock_is_a_lock_error_never_a_traceback_nor_a_silent_change(
        edits: list[tuple[str, float, bytes]], tmp_path: Path) -> None:
    _s, plan, _d = load_plan(ROOT / "examples" / "cpu.toml")
    good = _lock(dataclasses.replace(plan, base_image="kiln-base:bookworm"))
    data = bytearray(render_lock(good).encode())
    for kind, where, blob in edits:
        at = int(where * len(data))
        if kind == "cut":
            del data[at:]
        elif kind == "set":
            data[at:at + len(blob)] = blob
        else:
            data[at:at] = blob
    path = tmp_path / "cpu.lock"
    path.write_bytes(bytes(data))
    try:
        lock = read_lock(path)
    except LockError as e:
        assert e.exit_code == ExitCode.LOCK and "kiln lock" in e.hint
        return
    # accepted: then it pins exactly what was written (an edit in a comment or in spacing only)
    assert render_lock(lock) == render_lock(good)
