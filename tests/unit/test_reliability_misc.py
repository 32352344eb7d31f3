"""Issue #24, items 6-12: full disks, special files, concurrent builds' scratch, secrets at rest, broken pipes."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchkiln.building.execute import sweep_scratch
from torchkiln.building.invocation import scratch_dir
from torchkiln.building.sources import LocalIndexServer
from torchkiln.cli import main
from torchkiln.errors import ExitCode, FilesError, disk_full
from torchkiln.fsio import read_text, write_atomic, write_private

ROOT = Path(__file__).resolve().parents[2]


def _fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, filled up (never the shared disk); unmounted afterwards. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "existing").mkdir()
        _fill(mnt / "filler")
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_kiln_init_on_a_full_disk_leaves_nothing(full_disk: Path, capsys) -> None:
    target = full_disk / "existing" / "kiln.toml"
    code = main(["init", str(target)])
    err = capsys.readouterr().err
    assert code == ExitCode.FILES, err
    assert "fix:" in err and "space" in err and "Traceback" not in err
    assert os.listdir(full_disk / "existing") == []  # no empty kiln.toml, no temporary file


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(full_disk: Path) -> None:
    lock = full_disk / "existing" / "kiln.lock"
    os.remove(full_disk / "filler")
    lock.write_text("old lock\n")
    _fill(full_disk / "filler")
    with pytest.raises(OSError) as info:
        write_atomic(lock, "new lock\n" * 100_000)
    assert info.value.errno == errno.ENOSPC
    assert lock.read_text() == "old lock\n"
    assert sorted(os.listdir(lock.parent)) == ["kiln.lock"]
    error = FilesError.from_os(info.value)
    assert error.exit_code == ExitCode.FILES and "disk is full" in error.hint


def test_write_atomic_refuses_to_write_through_a_fifo_or_a_folder(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name in ("fifo", "dir"):
        with pytest.raises(FilesError, match="does not write through it"):
            write_atomic(tmp_path / name, "x")
    assert sorted(os.listdir(tmp_path)) == ["dir", "fifo"]


def test_read_text_caps_the_size(tmp_path: Path) -> None:
    big = tmp_path / "big.lock"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(FilesError, match="more than 1,024"):
        read_text(big, what="the lock", limit=1024)


def test_secret_files_are_private_from_the_first_byte(tmp_path: Path) -> None:
    os.umask(0o022)
    p = write_private(tmp_path / "uv.toml", "index-url = 'https://user:secret@example/simple'\n")
    assert p.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        write_private(p, "again")


def test_each_process_has_its_own_scratch_and_dead_ones_are_swept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    ctx = tmp_path / "ctx"
    mine, other = scratch_dir(ctx), scratch_dir(ctx, pid=os.getppid())
    assert mine != other and mine.name.endswith(f"-{os.getpid()}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = scratch_dir(ctx, pid=dead.pid)
    for d in (other, stale):
        (d / "secrets").mkdir(parents=True)
        (d / "secrets" / "uv.toml").write_text("token")
    sweep_scratch(mine)
    assert other.exists() and not stale.exists()  # a live build's folder is kept; a dead one's (and its secret) goes


def test_a_client_hanging_up_on_the_local_index_prints_no_traceback(tmp_path: Path, capfd) -> None:
    (tmp_path / "big.whl").write_bytes(os.urandom(8 << 20))
    server = LocalIndexServer(tmp_path)
    try:
        host, port = server.server.server_address[:2]
        for _ in range(3):
            s = socket.create_connection((str(host), int(port)))
            s.sendall(b"GET /big.whl HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(100)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            s.close()
        time.sleep(0.5)
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err


def test_a_reader_that_leaves_early_is_not_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.Popen([sys.executable, "-m", "torchkiln", "explain", "--gpus"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.readline()
    p.stdout.close()  # `| head -1`
    _, err = p.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err
    assert p.returncode == 0


def test_disk_full_output_is_exit_10_not_a_spec_or_image_error() -> None:
    error = disk_full("write /var/lib/docker/tmp/x: no space left on device", "details")
    assert error is not None and error.exit_code == ExitCode.FILES and "Free space" in error.hint
    assert disk_full("some other failure") is None


def test_a_failed_producer_of_a_pipe_is_the_error_reported_not_the_empty_stream() -> None:
    from torchkiln.errors import InputError
    from torchkiln.runner import Runner

    runner = Runner()
    with pytest.raises(InputError) as info, runner.pipe(
            ["sh", "-c", "echo 'Error: No such image: acme/gone:1' >&2; exit 1"], what="docker save acme/gone:1",
            error=lambda m, h, d: InputError(m, h or "kiln build it first", details=d)) as fd:
        if not os.read(fd, 512):
            raise InputError("the stream is not a readable docker-archive (empty file).")
    assert "docker save acme/gone:1 failed (exit code 1)" in info.value.message
    assert "No such image" in (info.value.details or "")


def test_a_registry_that_never_answers_is_exit_12_not_a_login_problem() -> None:
    from torchkiln.engines.engine import registry_failure
    from torchkiln.runner import Completed

    # what docker push printed against a socket that accepts connections and never answers (measured: 25 s)
    out = ('Get "http://127.0.0.1:5099/v2/": net/http: request canceled (Client.Timeout exceeded while awaiting '
           'headers)\n')
    error = registry_failure("docker", "127.0.0.1:5099/x:1", Completed(("docker", "push"), 1, "", out, 25.0))
    assert error is not None and error.exit_code == ExitCode.REGISTRY and "login" not in error.hint


def test_two_builds_of_one_spec_at_once_both_succeed(tmp_path: Path) -> None:
    """Issue #24 item 7: they shared a scratch folder, and one removed the other's id file and secrets."""
    import shutil

    sys.path.insert(0, str(Path(__file__).parent))
    from test_apptainer_build import fake_apptainer

    bindir, _log = fake_apptainer(tmp_path)
    # the stand-in takes a while and then needs its secrets still in place (another build must not have
    # removed or replaced them meanwhile)
    script = (bindir / "apptainer").read_text().replace(
        'echo "INFO:    Starting build..."',
        'echo "INFO:    Starting build..."; sleep 3; cat .kiln/secrets/kiln-uv >/dev/null || exit 9')
    (bindir / "apptainer").write_text(script)
    project = tmp_path / "proj"
    (project / "apps").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "cpu.toml", project / "kiln.toml")
    shutil.copyfile(ROOT / "examples" / "apps" / "cpu_app.py", project / "apps" / "cpu_app.py")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"a wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(PYTHONPATH=str(ROOT / "src"), KILN_CACHE_DIR=str(tmp_path / "cache"), TERM="dumb",
               PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    procs = [subprocess.Popen([sys.executable, "-m", "torchkiln", "build", str(project), "--engine", "apptainer",
                               "--find-links", str(wheels), "--tag", str(tmp_path / f"out{i}" / "img.sif")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err.decode()
    assert not list((tmp_path / "cache" / "scratch").glob("*/secrets/*"))  # both cleaned up after themselves


def test_render_on_a_full_disk_is_exit_10_and_leaves_nothing(full_disk: Path, capsys) -> None:
    out = full_disk / "existing" / "ctx"
    code = main(["render", str(ROOT / "examples" / "cpu.toml"), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == ExitCode.FILES, err
    assert "fix:" in err and "Traceback" not in err
    assert os.listdir(full_disk / "existing") == []


def test_a_stop_signal_wrapped_by_python_is_still_an_interruption() -> None:
    """SIGTERM while a dataclass is created during an import: Python wraps it in a RuntimeError."""
    from torchkiln.cli import _interruption
    from torchkiln.errors import Interrupted

    try:
        try:
            raise Interrupted(15)
        except Interrupted as inner:
            raise RuntimeError("Error calling __set_name__") from inner
    except RuntimeError as e:
        found = _interruption(e)
    assert isinstance(found, Interrupted) and found.signum == 15
    assert _interruption(ValueError("plain")) is None


def test_a_stop_signal_inside_logging_is_delivered_once_logging_has_returned() -> None:
    """CI on Python 3.10: SIGTERM landed in logging's handler-reference weakref callback, where a raised
    exception is printed as "Exception ignored ... Traceback" and dropped, so the stop was lost."""
    import logging

    from torchkiln.cli import _raise_interrupted
    from torchkiln.errors import Interrupted

    seen: list[bool] = []

    def inside_logging() -> None:  # the frame a signal sees while logging runs (its lock held)
        frame = sys._getframe()
        _raise_interrupted(15, frame)  # must not raise here
        seen.append(True)

    inside_logging.__code__ = inside_logging.__code__.replace(co_filename=logging.__file__)
    before = signal.getsignal(signal.SIGALRM)
    try:
        inside_logging()
        assert seen == [True]
        with pytest.raises(Interrupted) as stopped:
            time.sleep(2)  # the deferred stop arrives within 20 ms
        assert stopped.value.signum == 15
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    with pytest.raises(Interrupted):  # anywhere else it raises at once
        _raise_interrupted(2, sys._getframe())


def test_an_export_that_cannot_fit_is_refused_before_anything_is_saved(full_disk: Path) -> None:
    """Issue #24 items 4 and 10: a full disk was exit 7 "kiln build it first", after a partial save."""
    from types import SimpleNamespace

    from torchkiln.images.export import export_image
    from torchkiln.runner import Runner

    class Store:  # what export asks of the engine: the image's size, then its save (never reached here)
        name = "docker"
        saved = False

        def inspect_image(self, image: str) -> SimpleNamespace:
            return SimpleNamespace(size=5_000_000_000)

        def save(self, image: str, dest: Path) -> Path:
            self.saved = True
            raise AssertionError("saved although it cannot fit")

    store = Store()
    with pytest.raises(FilesError, match="nothing was written") as info:
        export_image("acme/x:1", "docker-archive", full_disk / "existing" / "x.tar", engine=store, runner=Runner())
    assert info.value.exit_code == ExitCode.FILES and not store.saved
    assert os.listdir(full_disk / "existing") == []
