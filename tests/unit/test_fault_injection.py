"""Issue #24: interrupt render, export, lock and build at random points (SIGINT and SIGTERM) and check what
is left: no partial output that a rerun would trust, no process left running, no secret left on disk.

Each command runs as a real ``kiln`` process (``python -m torchkiln``, or a driver that goes through the
CLI's ``main`` for export, whose engine part is not under test). No container engine is needed: the
build runs with a stand-in ``apptainer`` that hangs in its build step (with a child of its own), and the
package index is a socket that accepts connections and never answers (for the lock), or answers the
build's reachability probe. The random points come from a fixed seed (the runs are reproducible) and
are bounded: three per command, 12 runs, ~35 s on a loaded 2-core machine.
"""

from __future__ import annotations

import http.server
import io
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cr3t-fault-token"
SIGNALS = (signal.SIGINT, signal.SIGTERM)
RNG = random.Random(24)


def _points(n: int, low: float, high: float) -> list[tuple[float, signal.Signals]]:
    return [(round(RNG.uniform(low, high), 2), SIGNALS[i % 2]) for i in range(n)]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    (tmp / "tmp").mkdir(exist_ok=True)
    env.update(PYTHONPATH=str(ROOT / "src"), KILN_CACHE_DIR=str(tmp / "cache"), TMPDIR=str(tmp / "tmp"),
               TERM="dumb", **extra)
    return env


def _interrupt(argv: list[str], env: dict[str, str], delay: float, sig: int, cwd: Path | None = None
               ) -> tuple[int, str]:
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay)
    p.send_signal(sig)
    try:
        _out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _out, err = p.communicate()
        pytest.fail(f"{argv[3:5]} did not stop within 30 s of {signal.Signals(sig).name}")
    return p.returncode, err.decode("utf-8", "replace")


def _clean_exit(code: int, err: str) -> None:
    """Finished (0), or stopped by the signal with its exit code: never a traceback or a death by signal.

    One window is CPython's, not ours: a signal during the interpreter's own start (site, runpy), before
    any torchkiln code runs, kills it as CPython does; nothing has been written then, and the checks of
    what is left on disk still apply. It is told apart by a traceback (if any) without a torchkiln frame.
    """
    if code in (-2, -15, 1) and "/torchkiln/" not in err and "error:" not in err:
        return  # interrupted inside the interpreter's start-up (a loaded machine makes it last long)
    assert "Traceback" not in err, err
    assert code in (0, 130, 143) or (code not in (-2, -15) and "error:" in err), (code, err)


def _orphans(marker: str) -> list[str]:
    """Processes (other than this one) whose command line or environment names ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd or marker.encode() in env:
            shown = cmd.replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"{pid}: {shown}")
    return found


def _no_orphans(marker: str) -> None:
    deadline = time.monotonic() + 5
    while _orphans(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _orphans(marker) == []


def _secret_files(*folders: Path) -> list[str]:
    hits = []
    for folder in folders:
        for top, _dirs, files in os.walk(folder):
            for name in files:
                p = Path(top) / name
                try:
                    if p.is_file() and not p.is_symlink() and p.stat().st_size < 50_000_000 and \
                            TOKEN.encode() in p.read_bytes():
                        hits.append(str(p))
                except OSError:
                    continue
    return hits


def _kiln(*args: str) -> list[str]:
    return [sys.executable, "-m", "torchkiln", *args]


def _project(tmp: Path) -> Path:
    folder = tmp / "proj"
    (folder / "apps").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "cpu.toml", folder / "kiln.toml")
    shutil.copyfile(ROOT / "examples" / "apps" / "cpu_app.py", folder / "apps" / "cpu_app.py")
    return folder


# -- render ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("delay", "sig"), _points(3, 0.2, 1.2))
def test_an_interrupted_render_leaves_the_old_context_or_a_whole_new_one(delay: float, sig: int,
                                                                         tmp_path: Path) -> None:
    from torchkiln.building.context import MANIFEST, foreign_entries

    env = _env(tmp_path)
    out = tmp_path / "ctx"
    code, err = _interrupt(_kiln("render", str(ROOT / "examples" / "cpu.toml"), "-o", str(out)), env, delay, sig)
    _clean_exit(code, err)
    if out.exists():  # whole: exactly what the manifest lists, nothing half-written
        assert (out / MANIFEST).is_file() and foreign_entries(out) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ctx")] == []
    rerun = subprocess.run(_kiln("render", str(ROOT / "examples" / "cpu.toml"), "-o", str(out)), env=env,
                           capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr


# -- export --------------------------------------------------------------------------------------------------

DRIVER = r"""
import sys
from pathlib import Path

sys.argv[0] = "kiln"  # as the kiln script: Ctrl-C while the modules load exits 130, as there
from torchkiln.cli import app, main


@app.command("fault-export")
def _export(archive: Path, dest: Path) -> None:
    from torchkiln.images.archive import open_image
    from torchkiln.images.export import export_archive_to_sif
    from torchkiln.runner import Runner

    with open_image(archive) as image:
        export_archive_to_sif(image, dest, "acme/x:1", Runner(), processors=1)


sys.exit(main(["fault-export", *sys.argv[1:]]))
"""


def _big_archive(tmp: Path) -> Path:
    """A docker-archive with a few layers of incompressible files (mksquashfs takes a moment)."""
    import hashlib
    import json

    rng = random.Random(7)
    layers = []
    for n in range(3):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for i in range(24):
                raw = rng.randbytes(256 * 1024)
                ti = tarfile.TarInfo(f"data{n}/f{i}.bin")
                ti.size = len(raw)
                tf.addfile(ti, io.BytesIO(raw))
        layers.append(buf.getvalue())
    digests = ["sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers]
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "created": "2024-01-02T03:04:05Z",
                      "config": {"Cmd": ["/bin/sh"]}, "rootfs": {"type": "layers", "diff_ids": digests}}).encode()
    names = [f"{d[7:]}/layer.tar" for d in digests]
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["acme/x:1"], "Layers": names}]).encode()
    path = tmp / "image.docker.tar"
    with tarfile.open(path, "w") as tf:
        for name, raw in [("config.json", cfg), *zip(names, layers, strict=True), ("manifest.json", manifest)]:
            ti = tarfile.TarInfo(name)
            ti.size = len(raw)
            tf.addfile(ti, io.BytesIO(raw))
    return path


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("mksquashfs") is None:
        pytest.skip("mksquashfs is not installed")
    return _big_archive(tmp_path_factory.mktemp("archive"))


@pytest.mark.parametrize(("delay", "sig"), _points(3, 0.6, 2.0))
def test_an_interrupted_export_leaves_no_partial_sif_no_temporary_folder_and_no_mksquashfs(
        delay: float, sig: int, tmp_path: Path, big_archive: Path) -> None:
    from torchkiln.images.sif import read_sif

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "x.sif"
    code, err = _interrupt([sys.executable, str(driver), str(big_archive), str(dest)], _env(tmp_path), delay, sig)
    _clean_exit(code, err)
    if dest.exists():  # a whole SIF, or none; a signal that lands after the SIF was moved into place (while
        # the interpreter shuts down, main's handlers already restored) may still end the process by signal
        assert read_sif(dest).primary_partition() is not None, (code, err)
    assert sorted(os.listdir(out)) in ([], ["x.sif"])  # no .kiln-rootfs-*, .kiln-sqfs-* or partial file
    _no_orphans(str(out))


# -- lock ------------------------------------------------------------------------------------------------------


@pytest.fixture
def silent_index() -> Iterator[str]:
    """An index URL with a token, on a socket that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield f"http://kiln:{TOKEN}@127.0.0.1:{s.getsockname()[1]}/simple"
    s.close()


FAKE_APPTAINER = r"""#!/bin/sh
case "$1" in
--version) echo "apptainer version 1.3.4"; exit 0 ;;
build) echo "INFO:    Starting build..."; sleep 31.4159 & wait; exit 0 ;;
esac
exit 255
"""


def _fake_apptainer(tmp: Path) -> str:
    bindir = tmp / "fakebin"
    bindir.mkdir(exist_ok=True)
    (bindir / "apptainer").write_text(FAKE_APPTAINER)
    (bindir / "apptainer").chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize(("delay", "sig"), _points(3, 0.5, 2.0))
def test_an_interrupted_lock_leaves_no_secret_no_uv_and_no_partial_lock(delay: float, sig: int, tmp_path: Path,
                                                                        silent_index: str) -> None:
    from torchkiln.load import load_plan
    from torchkiln.lock import Lock, LockedBase, LockedWheel, plan_inputs, render_lock

    project = _project(tmp_path)
    _s, plan, _d = load_plan(project / "kiln.toml")
    # a previous lock for the same base: kiln lock keeps its base pin and asks no engine about it
    old = Lock(plan_inputs(plan), LockedBase(plan.base_image, "", "sha256:" + "a" * 64),
               (LockedWheel("torch", plan.platform, "torch", "2.13.0+cpu", "file:///w/torch.whl", "b" * 64),))
    (project / "kiln.lock").write_text(render_lock(old))
    before = (project / "kiln.lock").read_bytes()
    env = _env(tmp_path, PATH=_fake_apptainer(tmp_path), UV_HTTP_TIMEOUT="60")
    code, err = _interrupt(_kiln("lock", str(project), "--engine", "apptainer", "--index-url", silent_index),
                           env, delay, sig)
    _clean_exit(code, err)
    assert TOKEN not in err
    assert sorted(os.listdir(project)) == ["apps", "kiln.lock", "kiln.toml"]  # no .kiln.lock.*.tmp
    assert (project / "kiln.lock").read_bytes() == before  # the old lock, whole
    assert _secret_files(tmp_path / "tmp", tmp_path / "cache", project) == []
    _no_orphans(str(tmp_path / "tmp"))


# -- build -----------------------------------------------------------------------------------------------------


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def answering_index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield f"http://kiln:{TOKEN}@127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("delay", "sig"), _points(3, 0.8, 2.5))
def test_an_interrupted_build_leaves_no_secret_no_child_and_no_image(delay: float, sig: int, tmp_path: Path,
                                                                     answering_index: str) -> None:
    project = _project(tmp_path)
    env = _env(tmp_path, PATH=_fake_apptainer(tmp_path))
    code, err = _interrupt(_kiln("build", str(project), "--engine", "apptainer", "--index-url", answering_index),
                           env, delay, sig, cwd=tmp_path)
    _clean_exit(code, err)
    assert TOKEN not in err
    assert _secret_files(tmp_path / "tmp", tmp_path / "cache", project) == []
    assert not any(p.name.endswith((".sif", ".partial")) for p in project.iterdir())
    _no_orphans("31.4159")
    _no_orphans(str(tmp_path / "tmp"))
