#!/usr/bin/env python3
"""How fast is ``kiln inspect`` end to end? An image name, timed against the engine's own export.

    python bench/bench_inspect.py IMAGE [--engine docker|podman] [--rounds 2] [--cold] [--out F.json]
    python bench/bench_inspect.py IMAGE.tar          # the archive reader alone (a file you have)
    python bench/bench_inspect.py --assemble         # ... on a docker-archive built from the CUDA torch wheels

For an image name, each round runs, one after the other on the same machine: ``ENGINE save IMAGE >
/dev/null`` (the baseline: what exporting alone costs), ``kiln inspect --json --read direct IMAGE``
(the layer folders read in place) and ``kiln inspect --json --read export IMAGE`` (the engine's
save read from a pipe), each a fresh process timed whole: wall seconds, user and system CPU seconds
of it and its children (the engine's CLI; the daemon's own work is not visible), peak memory, and
the bytes it wrote to disk (``/proc/PID/io``: temporary files). It prints MB/s of the image's export
size, the CPU share of the wall time (the rest is waiting for the disk, the pipe or a CPU), the
ratios against the save of the same round, the load average, and whether the direct and export
reports agree. ``--cold`` first drops the image's layer files from the page cache
(``posix_fadvise(DONTNEED)`` on each, root only; other files are left alone).

For an archive, ``--assemble`` downloads torch (default 2.14.1) and every dependency through pip's
configured index or mirror, and writes a docker-archive holding a small base layer and a layer
with the wheels' contents installed under /opt/venv (about 6 GB, like a real torch image's venv),
cached in ``--cache``. "MB/s" is the archive size divided by the wall time of the inspection;
"read" is the time spent in I/O calls (and decompression), "parse" everything else.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass

from torchkiln.arch import Capability
from torchkiln.inspect.analyze import inspect_path
from torchkiln.inspect.coverage import Target

SITE = "opt/venv/lib/python3.11/site-packages"
TARGETS = tuple(
    Target(name, Capability.parse(cc))
    for name, cc in (
        ("T4", "7.5"),
        ("A100", "8.0"),
        ("L4", "8.9"),
        ("H100", "9.0"),
        ("B200", "10.0"),
        ("RTX 5090", "12.0"),
    )
)


def _download(torch: str, wheel_dir: pathlib.Path) -> list[pathlib.Path]:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(wheel_dir), f"torch=={torch}"]
    print(f"$ {' '.join(cmd)}", flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    names = {line.split("Saved ", 1)[1].strip().split("/")[-1] for line in out.splitlines() if "Saved " in line}
    names |= {
        line.rsplit("File was already downloaded ", 1)[1].strip().split("/")[-1]
        for line in out.splitlines()
        if "File was already downloaded" in line
    }
    wheels = sorted(wheel_dir / n for n in names if n.endswith(".whl"))
    if not any(w.name.startswith("torch-") for w in wheels):
        sys.exit(f"pip did not report a torch wheel:\n{out[-2000:]}")
    return wheels


class _Counting(io.RawIOBase):
    """A write-only file wrapper that counts bytes (tarfile writes the inner layer through it)."""

    def __init__(self, f: io.BufferedWriter) -> None:
        self.f = f
        self.n = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.n

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.f.write(b)
        self.n += len(b)
        return len(b)


def _member(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), mode, 0
    tar.addfile(ti, io.BytesIO(data))


def _layer_in_place(out: io.BufferedWriter, name: str, fill: Callable[[tarfile.TarFile], None]) -> tuple[str, int]:
    """Write a tar member ``name`` whose content is a tar written by ``fill(tar)``; return (sha256, size).

    The member header is written with a placeholder size and patched afterwards, so the multi-GB
    layer is written once, without a temporary copy.
    """
    start = out.tell()
    out.write(b"\0" * 512)
    counter = _Counting(out)
    inner = tarfile.open(fileobj=counter, mode="w", format=tarfile.GNU_FORMAT)
    fill(inner)
    inner.close()
    size = counter.n
    end = out.tell()
    out.write(b"\0" * (-size % 512))
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, 0o644, 0
    header = ti.tobuf(format=tarfile.GNU_FORMAT)
    assert len(header) == 512, "layer member name too long for one header block"
    out.seek(start)
    out.write(header)
    out.seek(end + (-size % 512))
    # the digest is not needed by inspect; use the member name so the archive is self-consistent
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest(), size


def _install_path(member: str) -> str:
    """Where pip puts a wheel member in a venv at /opt/venv (``NAME.data/KIND/...`` included)."""
    top, _, rest = member.partition("/")
    if top.endswith(".data") and "/" in rest:
        kind, _, path = rest.partition("/")
        if kind == "scripts":
            return f"opt/venv/bin/{path}"
        if kind in ("purelib", "platlib"):
            return f"{SITE}/{path}"
        if kind == "headers":
            return f"opt/venv/include/site/python3.11/{path}"
        return f"opt/venv/{path}"
    return f"{SITE}/{member}"


def assemble(dest: pathlib.Path, wheels: list[pathlib.Path]) -> None:
    """Write a docker-archive: a tiny base layer and one layer with every wheel's files under /opt/venv."""
    tmp = dest.with_suffix(".partial")
    with open(tmp, "wb") as out:
        base_name, venv_name = f"{0:064x}/layer.tar", f"{1:064x}/layer.tar"

        def base(tar: tarfile.TarFile) -> None:
            _member(tar, "etc/os-release", b'PRETTY_NAME="torchkiln bench base"\n')
            _member(tar, "opt/venv/pyvenv.cfg", b"home = /usr/local/bin\nversion = 3.11\n")

        def venv(tar: tarfile.TarFile) -> None:
            for whl in wheels:
                print(f"  + {whl.name}", flush=True)
                with zipfile.ZipFile(whl) as zf:
                    for info in zf.infolist():
                        if info.is_dir():
                            continue
                        name = _install_path(info.filename)
                        ti = tarfile.TarInfo(name)
                        ti.size, ti.mtime = info.file_size, 0
                        ti.mode = 0o755 if name.endswith((".so",)) or ".so." in name else 0o644
                        with zf.open(info) as src:
                            tar.addfile(ti, src)

        diff0, _ = _layer_in_place(out, base_name, base)
        diff1, _ = _layer_in_place(out, venv_name, venv)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "rootfs": {"type": "layers", "diff_ids": [diff0, diff1]},
                "history": [
                    {"created_by": "bench base"},
                    {"created_by": "RUN pip install torch (assembled from the wheels by bench_inspect.py)"},
                ],
            }
        ).encode()
        cfg = hashlib.sha256(config).hexdigest() + ".json"
        manifest = json.dumps(
            [{"Config": cfg, "RepoTags": ["kiln-bench/torch:assembled"], "Layers": [base_name, venv_name]}]
        )
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tail:
            _member(tail, cfg, config)
            _member(tail, "manifest.json", manifest.encode())
    os.replace(tmp, dest)


# -- end to end: an image name ------------------------------------------------------------------------

#: the kiln of this interpreter's environment (the checkout being measured), else the one on PATH
KILN = [str(pathlib.Path(sys.executable).with_name("kiln")) if pathlib.Path(sys.executable).with_name("kiln").exists()
        else shutil.which("kiln") or "kiln"]


@dataclass
class Timed:
    round: int
    what: str
    wall: float
    user: float
    sys: float
    max_rss_mb: float
    disk_written_mb: float
    rc: int

    @property
    def cpu_share(self) -> float:
        return (self.user + self.sys) / self.wall if self.wall else 0.0


def _io_written(pid: int, box: list[int], done: threading.Event) -> None:
    """Poll /proc/PID/io: the most bytes written to files and not yet taken back, at any moment.

    ``write_bytes`` counts pages as they are dirtied (temporary files included) and
    ``cancelled_write_bytes`` the dirty pages dropped by deleting a file: their difference while
    the process runs is its extra disk use (peak: a deleted temporary file at its largest).
    """
    path = f"/proc/{pid}/io"
    while not done.is_set():
        try:
            with open(path) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            net = int(fields["write_bytes"]) - int(fields["cancelled_write_bytes"])
            box[0] = max(box[0], net)
        except (OSError, KeyError, ValueError):
            return
        done.wait(0.02)


def _timed(round_: int, what: str, argv: list[str], stdout: int | io.BufferedWriter) -> Timed:
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
    box, done = [0], threading.Event()
    poller = threading.Thread(target=_io_written, args=(proc.pid, box, done), daemon=True)
    poller.start()
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    poller.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return Timed(round_, what, wall, ru.ru_utime, ru.ru_stime, ru.ru_maxrss / 1024, box[0] / 1e6, proc.returncode)


def _layer_dirs(engine: str, image: str) -> list[pathlib.Path]:
    out = subprocess.run([engine, "image", "inspect", "--format", "{{json .GraphDriver.Data}}", image],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    return [pathlib.Path(d) for d in (data.get("LowerDir", "").split(":") + [data.get("UpperDir", "")]) if d]


def _drop_cache(dirs: list[pathlib.Path]) -> None:
    for d in dirs:
        for root, _dirs, files in os.walk(d):
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def _analysis(report: dict) -> dict:  # type: ignore[type-arg]
    r = dict(report)
    r.pop("read", None)
    image = dict(r["image"])
    for k in ("format", "archive_size"):
        image.pop(k)
    image["layers"] = [{k: v for k, v in layer.items() if k != "blob_size"} for layer in image["layers"]]
    r["image"] = image
    return r


def end_to_end(image: str, engine: str, rounds: int, cold: bool, out: pathlib.Path | None) -> int:
    binary = shutil.which(engine) or engine
    save_cmd = [binary, "save", *(["--format", "docker-archive"] if engine == "podman" else []), image]
    dirs = _layer_dirs(binary, image) if cold else []
    if cold and os.geteuid() != 0:
        sys.exit("--cold needs root (the layer files are root's)")
    size = int(subprocess.run([binary, "image", "inspect", "--format", "{{.Size}}", image],
                              capture_output=True, text=True, check=True).stdout.strip())
    print(f"image {image} ({engine}, {size / 1e9:.2f} GB as the engine counts it); cache: {'cold' if cold else 'warm'}")
    rows: list[Timed] = []
    reports: dict[str, dict] = {}  # type: ignore[type-arg]
    loads = []
    tmp = pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
    for r in range(1, rounds + 1):
        loads.append(os.getloadavg()[0])
        for what in ("docker save > /dev/null" if engine == "docker" else "podman save > /dev/null",
                     "kiln inspect --read direct", "kiln inspect --read export"):
            if cold:
                _drop_cache(dirs)
            if "save" in what:
                with open(os.devnull, "wb") as null:
                    rows.append(_timed(r, what, save_cmd, null.fileno()))
                continue
            mode = what.rsplit(" ", 1)[1]
            dest = tmp / f"kiln-bench-inspect-{os.getpid()}-{mode}.json"
            with open(dest, "wb") as f:
                rows.append(_timed(r, what, [*KILN, "inspect", "--json", "--engine", engine, "--read", mode, image], f))
            reports[mode] = json.loads(dest.read_text()) if rows[-1].rc == 0 else {}
            dest.unlink()
    loads.append(os.getloadavg()[0])
    archive = (reports.get("export", {}).get("image") or {}).get("archive_size") or size
    print(f"export size {archive / 1e9:.2f} GB; load average (1 min) {', '.join(f'{x:.1f}' for x in loads)}"
          f" on {os.cpu_count()} CPUs\n")
    print(f"{'round':>5}  {'what':<28} {'wall s':>7} {'user s':>7} {'sys s':>6} {'cpu/wall':>8} {'MB/s':>6}"
          f" {'×save':>6} {'peak MB':>8} {'disk MB':>8}")
    print("       (cpu/wall: user+sys over wall, the rest is I/O or waiting for a CPU; peak MB: largest resident"
          " memory; disk MB: most bytes written to files at once)")
    for row in rows:
        save = next(x for x in rows if x.round == row.round and "save" in x.what)
        print(f"{row.round:>5}  {row.what:<28} {row.wall:>7.2f} {row.user:>7.2f} {row.sys:>6.2f} {row.cpu_share:>8.0%}"
              f" {archive / 1e6 / row.wall:>6.0f} {row.wall / save.wall:>6.2f} {row.max_rss_mb:>8.0f}"
              f" {row.disk_written_mb:>8.1f}" + ("" if row.rc == 0 else f"  exit {row.rc}"))
    same = bool(reports.get("direct")) and _analysis(reports["direct"]) == _analysis(reports.get("export", {}))
    direct_read = reports.get("direct", {}).get("read", {})
    print(f"\ndirect report == export report (apart from how it was read): {same}; direct read: {direct_read}")
    if out is not None:
        out.write_text(json.dumps({"image": image, "engine": engine, "size": size, "archive_size": archive,
                                   "cold": cold, "load_average": loads, "cpus": os.cpu_count(), "same_report": same,
                                   "rows": [asdict(x) for x in rows]}, indent=1) + "\n")
    return 0 if all(x.rc == 0 for x in rows) and same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", help="archive / OCI layout path, or an image name in the local engine")
    ap.add_argument("--assemble", action="store_true", help="build a docker-archive from the CUDA torch wheels")
    ap.add_argument("--torch", default="2.14.1")
    ap.add_argument("--cache", type=pathlib.Path, default=pathlib.Path.home() / ".cache/torchkiln/bench")
    ap.add_argument("--runs", type=int, default=3, help="archive mode: inspections of the archive")
    ap.add_argument("--engine", default="docker", choices=("docker", "podman"))
    ap.add_argument("--rounds", type=int, default=1, help="image mode: rounds of save / direct / export")
    ap.add_argument("--cold", action="store_true", help="image mode: drop the layer files from the page cache first")
    ap.add_argument("--out", type=pathlib.Path, help="image mode: write every measurement here as JSON")
    args = ap.parse_args()

    if args.image and not args.assemble and not pathlib.Path(args.image).exists():
        return end_to_end(args.image, args.engine, args.rounds, args.cold, args.out)
    if args.assemble or not args.image:
        archive = args.cache / f"torch-{args.torch}-assembled.tar"
        if not archive.exists():
            wheels = _download(args.torch, args.cache / "wheels")
            print(f"assembling {archive} from {len(wheels)} wheels…", flush=True)
            t = time.perf_counter()
            assemble(archive, wheels)
            print(f"  written in {time.perf_counter() - t:.0f} s")
    else:
        archive = pathlib.Path(args.image)

    size = (
        archive.stat().st_size
        if archive.is_file()
        else sum(p.stat().st_size for p in archive.rglob("*") if p.is_file())
    )
    print(f"\nimage: {archive} ({size / 1e9:.2f} GB)")
    print(f"{'run':>3} {'seconds':>8} {'cpu s':>6} {'MB/s':>8} {'read':>6} {'parse':>6} {'bytes read':>11} "
          f"{'files':>7} {'ELF':>5} {'CUDA':>5} {'entries':>8}")  # fmt: skip

    best = None
    for run in range(1, args.runs + 1):
        cpu0 = time.process_time()
        report = inspect_path(archive, TARGETS)
        cpu = time.process_time() - cpu0
        st = report.stats
        read_share = st.read_seconds / st.seconds if st.seconds else 0.0
        cuda = [b for b in report.binaries if b.entries]
        entries = sum(len(b.device_entries) for b in cuda)
        print(
            f"{run:>3} {st.seconds:>8.2f} {cpu:>6.2f} {size / 1e6 / st.seconds:>8.0f} "
            f"{read_share:>6.1%} {1 - read_share:>6.1%} {st.bytes_read / 1e6:>9.1f}MB "
            f"{st.files:>7} {st.elf_files:>5} {len(cuda):>5} {entries:>8}"
        )
        best = st if best is None or st.seconds < best.seconds else best
    assert best is not None
    waste = report.waste.total if report.waste else 0
    print(
        f"\nbest: {best.seconds:.2f} s for {size / 1e9:.2f} GB = {size / 1e6 / best.seconds:.0f} MB/s; "
        f"read {best.read_seconds:.2f} s ({best.read_seconds / best.seconds:.1%}), "
        f"parse {best.seconds - best.read_seconds:.2f} s; wasted bytes found {waste / 1e6:.1f} MB; "
        f"failing binaries {len(report.failing)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
