#!/usr/bin/env python3
"""How fast is ``kiln inspect`` on a ~6 GB CUDA torch image? Prints MB/s and the read / parse split.

    python bench/bench_inspect.py IMAGE.tar          # a docker-archive or OCI layout you have
    python bench/bench_inspect.py my-image:tag       # an image in the local docker (saved first, not timed)
    python bench/bench_inspect.py --assemble         # build a docker-archive from the real CUDA torch wheels

``--assemble`` downloads torch (default 2.14.1) and every dependency through pip's configured index
or mirror, and writes a docker-archive holding a small base layer and a layer with the wheels'
contents installed under /opt/venv (about 6 GB, like a real torch image's venv). It is written in
one pass, straight from the wheels into the archive, and cached in ``--cache`` for the next run.

"MB/s" is the archive size divided by the wall time of the whole inspection (layers, waste, every
fat binary, coverage): inspection reads only tar headers, the first bytes of each file and the
fat-binary headers, so it is far faster than reading the image. "read" is the time spent in I/O
calls (and decompression, for compressed layers); "parse" is everything else. "cpu s" is the
process's CPU time, a steadier figure than wall time on a busy machine.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable

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


def _save(image: str, dest: pathlib.Path) -> None:
    from torchkiln.engines import get_engine

    engine = get_engine(None)
    print(f"saving {image} with {engine.name} (not timed)…", flush=True)
    engine.save(image, dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", help="archive / OCI layout path, or an image name in the local engine")
    ap.add_argument("--assemble", action="store_true", help="build a docker-archive from the CUDA torch wheels")
    ap.add_argument("--torch", default="2.14.1")
    ap.add_argument("--cache", type=pathlib.Path, default=pathlib.Path.home() / ".cache/torchkiln/bench")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    tmpdir = None
    if args.assemble or not args.image:
        archive = args.cache / f"torch-{args.torch}-assembled.tar"
        if not archive.exists():
            wheels = _download(args.torch, args.cache / "wheels")
            print(f"assembling {archive} from {len(wheels)} wheels…", flush=True)
            t = time.perf_counter()
            assemble(archive, wheels)
            print(f"  written in {time.perf_counter() - t:.0f} s")
    elif pathlib.Path(args.image).exists():
        archive = pathlib.Path(args.image)
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="kiln-bench-")
        archive = pathlib.Path(tmpdir.name) / "image.tar"
        _save(args.image, archive)

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
    if tmpdir is not None:
        tmpdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
