"""The first-run record (issue #28 item 4): firstrun.py run for real with this venv's CPU torch, the
record format ctr-remote reads, the host side's argv and parsing, `kiln verify --record-first-run`
and `kiln push --first-run` (its refusals come before any engine or tool is looked at)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from torchkiln.engines import compress
from torchkiln.errors import ExitCode, FilesError, InputError, NoGPUError
from torchkiln.runner import Completed, Runner
from torchkiln.verify import firstrun
from torchkiln.verify.record import parse_record, read_record, render_record, write_record
from torchkiln.verify.runner import (
    MOUNT,
    FirstRun,
    firstrun_args,
    interpret_firstrun,
    parse_firstrun,
    stage_bundle,
)

FIRSTRUN_PY = Path(firstrun.__file__)


# --- the record file -------------------------------------------------------------------------

def test_render_and_parse_round_trip() -> None:
    paths = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/venv/lib/python3.12/site-packages/torch/__init__.py",
             "/usr/lib/x86_64-linux-gnu/libc.so.6", 'etc/"quoted" name']
    text = render_record(paths)
    assert text.splitlines()[0] == '{"path": "/usr/lib/x86_64-linux-gnu/libc.so.6"}'
    assert len(text.splitlines()) == 3  # first occurrence kept
    assert parse_record(text, "r.json") == list(dict.fromkeys(paths))


def test_parse_takes_what_ctr_remote_takes() -> None:
    # any whitespace between objects, extra keys (recorder.Entry has manifestDigest, layerIndex), no slash
    text = '{"path": "a/b"} {"path": "/c", "manifestDigest": "sha256:00", "layerIndex": 2}\n\n  {"path":"/c"}\n'
    assert parse_record(text, "r") == ["a/b", "/c"]


@pytest.mark.parametrize(("text", "match"), [
    ("", "names no file"),
    ("\n  \n", "names no file"),
    ('{"path": "/a"}\n{"path": /b}\n', "not JSON at line 2"),
    ('{"path": "/a"}\n{"pat": "/b"}\n', 'without a "path" string at line 2'),
    ('{"path": 3}\n', 'without a "path" string at line 1'),
    ('{"path": ""}\n', 'without a "path" string'),
    ('["/a"]\n', 'without a "path" string'),
    ('"/a"\n', 'without a "path" string'),
])
def test_malformed_records_are_input_errors(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as e:
        parse_record(text, "first-run.json")
    assert e.value.exit_code == ExitCode.INPUT and "--record-first-run" in str(e.value.hint)


def test_read_record_refuses_missing_folders_and_binary(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot be read"):
        read_record(tmp_path / "missing.json")
    with pytest.raises(InputError, match="a folder"):
        read_record(tmp_path)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="not UTF-8"):
        read_record(tmp_path / "bin.json")


def test_write_record_is_atomic_and_refuses_a_folder(tmp_path: Path) -> None:
    dest = tmp_path / "first-run.json"
    write_record(dest, ["/a", "/b"])
    write_record(dest, ["/c"])  # replaced whole
    assert read_record(dest) == ["/c"]
    assert [p.name for p in tmp_path.iterdir()] == ["first-run.json"]  # no temporary file left
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(FilesError):
        write_record(tmp_path / "dir.json", ["/a"])


# --- ctr-remote's argv -----------------------------------------------------------------------

def test_convert_args() -> None:
    assert compress.convert_args("estargz", "src:1", "dst:1") == ["images", "convert", "--estargz", "--oci",
                                                                  "src:1", "dst:1"]
    assert compress.convert_args("estargz", "src:1", "dst:1", Path("/r/first-run.json")) == [
        "images", "convert", "--estargz", "--estargz-record-in", "/r/first-run.json", "--oci", "src:1", "dst:1"]
    with pytest.raises(InputError):
        compress.convert_args("zstd", "a", "b")


class _Recording(Runner):
    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> Completed:  # type: ignore[override]
        args = [str(a) for a in argv]
        self.argvs.append(args)
        if "save" in args:  # `docker save -o FILE IMAGE` leaves the archive the import reads
            Path(args[args.index("-o") + 1]).write_bytes(b"")
        out = "kiln.local/push/src:1\n" if args[-2:] == ["ls", "-q"] else ""
        return Completed(tuple(args), 0, out, "", 0.0)


def test_push_converted_passes_the_record_to_convert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = _Recording()
    compress.push_converted(runner, "docker", "docker", "img:1", "127.0.0.1:5000/img:1", "estargz",
                            env={"CONTAINERD_ADDRESS": "/run/c.sock"}, first_run=Path("rec.json"))
    convert = next(a for a in runner.argvs if "convert" in a)
    i = convert.index("--estargz-record-in")
    assert convert[i + 1] == str(tmp_path / "rec.json")  # absolute: ctr-remote may run elsewhere
    assert convert.index("--estargz") < i < convert.index("--oci")
    runner = _Recording()
    compress.push_converted(runner, "docker", "docker", "img:1", "127.0.0.1:5000/img:1", "estargz",
                            env={"CONTAINERD_ADDRESS": "/run/c.sock"})
    assert not any("--estargz-record-in" in a for a in runner.argvs)


# --- firstrun.py's pure parts and the host side ----------------------------------------------

def test_firstrun_args_are_what_firstrun_py_accepts() -> None:
    assert firstrun_args(MOUNT) == [f"{MOUNT}/firstrun.py", "--json"]
    args = firstrun_args("/b", ("transformers", "flash_attn"))
    assert args == ["/b/firstrun.py", "--json", "--import", "transformers,flash_attn"]
    assert firstrun.parse_args(args[1:]).imports == "transformers,flash_attn"


def test_the_bundle_carries_firstrun_py(tmp_path: Path) -> None:
    stage_bundle(tmp_path / "b", None)
    assert (tmp_path / "b" / "firstrun.py").read_bytes() == FIRSTRUN_PY.read_bytes()


def test_select_keeps_existing_regular_files_resolved_in_order(tmp_path: Path) -> None:
    old = time.time() - 100
    a, b, new = tmp_path / "a.so", tmp_path / "b.py", tmp_path / "new.pyc"
    for f in (a, b, new):
        f.write_bytes(b"x" * 10)
    os.utime(a, (old, old))
    os.utime(b, (old, old))
    (tmp_path / "link.so").symlink_to(a)
    (tmp_path / "bundle").mkdir()
    own = tmp_path / "bundle" / "firstrun.py"
    own.write_text("")
    os.utime(own, (old, old))
    since = time.time() - 50  # new.pyc was written "by the run"
    files, total = firstrun.select(
        [str(b), str(tmp_path / "link.so"), str(a), str(new), str(tmp_path), str(tmp_path / "gone"), str(own),
         "/proc/self/maps", "/dev/null"], since=since, exclude=(str(tmp_path / "bundle"),))
    assert files == [os.path.realpath(b), os.path.realpath(a)] and total == 20


def test_files_the_engine_mounts_in_are_left_out(tmp_path: Path) -> None:
    # /proc/self/mountinfo of a `docker run --gpus all` container: the driver's libraries are bind mounts
    mountinfo = (
        "612 535 0:61 / / rw,relatime master:317 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A\n"
        "640 612 259:1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"
        " ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p1 rw\n"
        "641 612 259:1 /var/lib/docker/containers/x/hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p1 rw\n"
        "642 612 259:1 /srv/a\\040b /mnt/a\\040b rw - ext4 /dev/nvme0n1p1 rw\n"
    )
    assert firstrun.mount_points(mountinfo) == {
        "/", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "/etc/hosts", "/mnt/a b"}
    old = time.time() - 100
    lib, own = tmp_path / "libcuda.so.1", tmp_path / "libtorch.so"
    for f in (lib, own):
        f.write_bytes(b"x")
        os.utime(f, (old, old))
    files, _ = firstrun.select([str(lib), str(own)], since=time.time(), exclude=(), mounted={str(lib), "/"})
    assert files == [str(own)]
    assert isinstance(firstrun.own_mount_points(), set)


def test_the_hook_records_reads_not_writes(tmp_path: Path) -> None:
    rec = firstrun.Recorder()
    rec.hook("open", (str(tmp_path / "r"), "rb", 0))
    rec.hook("open", (str(tmp_path / "w"), "w", 0))
    rec.hook("open", (str(tmp_path / "o"), None, os.O_RDONLY))
    rec.hook("open", (str(tmp_path / "ow"), None, os.O_WRONLY | os.O_CREAT))
    rec.hook("open", (3, "rb", 0))  # open(fd)
    rec.hook("import", ("_ext", str(tmp_path / "_ext.so"), None, None, None))
    rec.hook("ctypes.dlopen", ("libcuda.so.1",))  # a bare name: /proc/self/maps has the path
    names = [Path(p).name for p in rec.seen if p.startswith(str(tmp_path))]
    assert names == ["r", "o", "_ext.so"]
    assert any(p.endswith(".so") or "python" in p for p in rec.seen if not p.startswith(str(tmp_path)))


def _out(**over: object) -> str:
    data: dict[str, object] = {"schema": firstrun.SCHEMA, "files": ["/a.so", "/b.py"], "device": "cpu",
                               "torch": "2.13.0+cpu", "bytes": 3 << 20, "kernels": ["matmul bfloat16"]}
    data.update(over)
    return "a warning on stdout\n" + json.dumps(data) + "\n"


def test_parse_firstrun() -> None:
    got = parse_firstrun(_out(), "t")
    assert got == FirstRun(files=("/a.so", "/b.py"), device="cpu", torch="2.13.0+cpu", bytes=3 << 20,
                           kernels=("matmul bfloat16",))
    assert got.mib == 3.0
    with pytest.raises(InputError, match="failed: ModuleNotFoundError"):
        parse_firstrun(_out(error="ModuleNotFoundError: No module named 'torch'", files=[]), "t")
    with pytest.raises(InputError, match="printed no record"):
        parse_firstrun("nothing\n", "t")
    with pytest.raises(InputError, match="recorded no file"):
        parse_firstrun(_out(files=[]), "t")


def test_interpret_firstrun_classifies_engine_failures() -> None:
    argv = ("docker", "run", "--rm", "img", "/kiln-verify/firstrun.py")
    ok = interpret_firstrun(Completed(argv, 0, _out(), "", 1.0), "docker:img", engine="docker", image="img",
                            python="python3")
    assert ok.device == "cpu"
    no_gpu = Completed(argv, 125, "", 'docker: Error response from daemon: could not select device driver "" '
                                      "with capabilities: [[gpu]].", 1.0)
    with pytest.raises(NoGPUError):
        interpret_firstrun(no_gpu, "docker:img", engine="docker", image="img", python="python3")
    with pytest.raises(InputError, match="cannot be started"):
        interpret_firstrun(Completed(argv, 127, "", 'exec: "python3": executable file not found in $PATH', 1.0),
                           "docker:img", engine="docker", image="img", python="python3")


# --- real runs with this venv's Python (CPU torch) -------------------------------------------

def _run_firstrun(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(FIRSTRUN_PY), *args], capture_output=True, text=True, timeout=600,
                          check=False)


def test_firstrun_py_records_import_torch_and_cpu_kernels() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():  # pragma: no cover - a GPU host records cuda
        pytest.skip("a CUDA device is visible")
    p = _run_firstrun("--json", "--import", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["device"] == "cpu" and out["torch"] == torch.__version__ and "error" not in out
    files = out["files"]
    assert len(files) == len(set(files)) and all(os.path.isabs(f) and os.path.isfile(f) for f in files)
    assert out["bytes"] == sum(os.path.getsize(f) for f in files)
    names = [os.path.basename(f) for f in files]
    assert "libtorch_cpu.so" in names
    torch_dir = os.path.realpath(os.path.dirname(torch.__file__))
    assert {os.path.join(torch_dir, "__init__.py"),
            os.path.join(torch_dir, "__pycache__", f"__init__.{sys.implementation.cache_tag}.pyc")} & set(files)
    assert not any(f.startswith(("/proc/", "/sys/", "/dev/")) or f.startswith(str(FIRSTRUN_PY.parent) + "/")
                   for f in files)
    # the libraries ld.so loaded (no audit event) come from /proc/self/maps
    assert any(n.startswith("libc.so") for n in names)


def test_firstrun_py_without_torch_reports_the_error(tmp_path: Path) -> None:
    wrapper = tmp_path / "python-nosite"  # the same interpreter without site-packages: no torch
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    p = _run_firstrun("--json", python=str(wrapper))
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(p.stdout.splitlines()) == 1
    out = json.loads(p.stdout)
    assert "No module named 'torch'" in out["error"] and out["device"] is None


def test_kiln_verify_here_records_a_first_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a CUDA device is visible")
    from torchkiln.cli import main

    dest = tmp_path / "first-run.json"
    assert main(["verify", "--here", "--record-first-run", str(dest), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    paths = read_record(dest)
    assert summary["files"] == len(paths) > 100 and summary["device"] == "cpu"
    assert summary["gpu_kernels_run"] is False and summary["record"] == str(dest)
    assert summary["next"] == f"kiln push IMAGE --compression estargz --first-run {dest}"
    assert any(p.endswith("/libtorch_cpu.so") for p in paths)
    assert main(["verify", "--here", "--record-first-run", str(dest)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"recorded {len(paths):,} files (" in text and "MiB) a first run reads (device: cpu)" in text
    assert "GPU kernels were not run" in text and "--compression estargz --first-run" in text


def test_kiln_verify_record_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    rec = str(tmp_path / "r.json")
    assert main(["verify", "--here", "--record-first-run", rec, "--only", "matmul"]) == ExitCode.USAGE
    assert main(["verify", "--here", "--import", "numpy"]) == ExitCode.USAGE
    assert main(["verify", "--here", "--record-first-run", rec, "--python", "/nonexistent/python3"]) \
        == ExitCode.ENGINE_MISSING
    assert not (tmp_path / "r.json").exists()


# --- kiln push --first-run: refused before anything runs -------------------------------------

@pytest.fixture
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without any engine or tool: a refusal that comes first is exit 7, not 5 or 11."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))


@pytest.mark.usefixtures("no_engine")
@pytest.mark.parametrize("compression", ["gzip", "zstd", "zstd:chunked"])
def test_first_run_with_another_compression_is_input_error(tmp_path: Path, compression: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    rec = write_record(tmp_path / "r.json", ["/etc/os-release"])
    args = ["push", "img:1", "--first-run", str(rec)]
    args += ["--compression", compression] if compression != "gzip" else []
    assert main(args) == ExitCode.INPUT
    err = " ".join(capsys.readouterr().err.split())
    assert f"--compression {compression} has no such order" in err and "Traceback" not in err


@pytest.mark.usefixtures("no_engine")
@pytest.mark.parametrize(("content", "match"), [
    (None, "cannot be read"), ("not json\n", "is not JSON"), ('{"file": "/a"}\n', 'without a "path"'),
    ("", "names no file"),
])
def test_a_bad_record_is_input_error_before_the_engine(tmp_path: Path, content: str | None, match: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    rec = tmp_path / "r.json"
    if content is not None:
        rec.write_text(content)
    assert main(["push", "img:1", "--compression", "estargz", "--first-run", str(rec)]) == ExitCode.INPUT
    assert match in " ".join(capsys.readouterr().err.split())


def test_the_engine_refuses_a_record_without_estargz() -> None:
    from torchkiln.engines.docker import DOCKER
    from torchkiln.engines.engine import EngineInfo
    from torchkiln.engines.oci import OciEngine

    runner = _Recording()
    engine = OciEngine(DOCKER, EngineInfo("docker", "/usr/bin/docker", "20.10", "20.10", "buildkit"), runner)
    with pytest.raises(InputError, match="estargz only"):
        engine.push("127.0.0.1:5000/a:1", "zstd", first_run=Path("r.json"))
    assert runner.argvs == []  # nothing ran


class _NoGpuEngine:
    """An engine whose host has no NVIDIA runtime: `--gpus all` fails as docker fails."""

    name = "docker"

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def run_request(self, request: Any, *, check: bool = True, timeout: float | None = None) -> Completed:
        self.requests.append(request)
        argv = ("docker", "run", request.image)
        if request.gpus:
            return Completed(argv, 125, "", 'docker: Error response from daemon: could not select device driver "" '
                                            "with capabilities: [[gpu]].", 0.1)
        return Completed(argv, 0, _out(), "", 0.1)


def test_an_engine_without_gpus_records_a_cpu_run(capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli.verify import _record_in_image
    from torchkiln.verify.runner import VerifyOptions

    engine = _NoGpuEngine()
    got = _record_in_image("img:1", engine, VerifyOptions(), ("json",), "GPUs attached")  # type: ignore[arg-type]
    assert got.device == "cpu" and [r.gpus for r in engine.requests] == [True, False]
    assert engine.requests[1].argv[-2:] == ("--import", "json")
    assert "Recording without GPUs" in " ".join(capsys.readouterr().err.split())
    engine = _NoGpuEngine()
    with pytest.raises(InputError):  # the run itself failing is not retried
        _record_in_image("img:1", _Failing(), VerifyOptions(), (), "GPUs attached")  # type: ignore[arg-type]


class _Failing(_NoGpuEngine):
    def run_request(self, request: Any, *, check: bool = True, timeout: float | None = None) -> Completed:
        self.requests.append(request)
        return Completed(("docker",), 1, _out(error="ModuleNotFoundError: No module named 'torch'"), "", 0.1)


def test_the_destination_is_checked_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchkiln.cli import main

    assert main(["verify", "--here", "--record-first-run", str(tmp_path / "no" / "r.json")]) == ExitCode.FILES
    assert "does not exist" in capsys.readouterr().err
