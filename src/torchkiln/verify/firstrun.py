"""Record the files a first run of torch reads: what an eStargz image should place first in its layers.

This file is copied or mounted into images and run as a script (like ``checks.py``, beside it)::

    python firstrun.py [--json] [--import a,b]

It imports nothing but the standard library (torch lazily, so that a missing torch is reported,
not a traceback). It installs an audit hook (PEP 578) before anything else, then does a first run:
``import torch`` (and the modules given with ``--import``), then the first kernels: a bf16 (fp16
where bf16 is not supported) matmul, a cuDNN conv2d and ``scaled_dot_product_attention`` on the
GPU, then a synchronize; without a CUDA device the same ops run on the CPU.

What it sees, in the order first seen:

* ``open`` events: every file opened for reading (``open()``, ``os.open``, and ``io.open_code``,
  which reads each ``.py`` / ``.pyc`` an import loads);
* ``import`` events that name a file: extension modules (loaded with ``dlopen``, which raises no
  ``open`` event);
* ``ctypes.dlopen`` events that name a path;
* the regular files mapped in ``/proc/self/maps``: the shared libraries ld.so loaded for those
  (``DT_NEEDED``), which no audit event shows. The maps are read before each extension module or
  ``ctypes`` library loads, between the steps and at the end, so a library lands near the import
  that pulled it in.

Each path is resolved (symlinks followed: an eStargz layer holds a symlink's target as its own tar
entry, and the snapshotter prefetches entries, not links). Kept: existing regular files that the
run did not write itself (modified before it started), outside ``/proc``, ``/sys``, ``/dev`` and
this script's own folder, and not mounted into the container one by one (the host's driver
libraries that the NVIDIA Container Toolkit binds in: no layer holds them). Printed as JSON on stdout::

    {"schema": ..., "files": [...], "device": "cuda"|"cpu", "torch": "2.11.0+cu130", "bytes": N, ...}

Exit codes: 0 recorded, 1 the first run failed (torch missing, a kernel raised: the JSON then has
an ``error`` field and the files seen until then), 2 bad arguments.

Our own code: the audit-hook recorder is the in-process equivalent of ``ctr-remote images
optimize``'s fanotify recorder, which needs a privileged container of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import stat
import sys
import time
import traceback
from typing import Any

SCHEMA = "torchkiln.firstrun/1"

EXIT_OK = 0
EXIT_FAILED = 1

#: never recorded: kernel and device files, and nothing an image's layers hold
EXCLUDED_ROOTS = ("/proc", "/sys", "/dev")


class Recorder:
    """Paths in first-seen order (not yet filtered: the filter runs at the end, outside the hook)."""

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}
        self._busy = False
        self.active = True

    def add(self, path: Any) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path:
            return  # a file descriptor (open(fd)), or nothing
        if not path.startswith("/"):
            with contextlib.suppress(OSError):
                path = os.path.join(os.getcwd(), path)
        if path not in self.seen:
            self.seen[path] = None

    def scan_maps(self) -> None:
        """Add every file mapped into this process (shared libraries, whoever loaded them)."""
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return  # not Linux, or no /proc: the audit events are all there is
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)"):
                self.add(parts[5])

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or self._busy:
            return  # the hook's own reads of /proc/self/maps raise events too
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if _reads(mode, flags):
                self.add(path)
        elif event == "import":
            filename = args[1] if len(args) > 1 else None
            if isinstance(filename, (str, bytes)):
                self._busy = True
                try:
                    self.scan_maps()  # what the previous extension module pulled in comes first
                    self.add(filename)
                finally:
                    self._busy = False
        elif event == "ctypes.dlopen":
            name = args[0] if args else None
            self._busy = True
            try:
                self.scan_maps()
                if isinstance(name, (str, bytes)) and "/" in os.fsdecode(name):
                    self.add(name)
            finally:
                self._busy = False

    def step(self) -> None:
        """Between steps: the libraries mapped since the last look."""
        self._busy = True
        try:
            self.scan_maps()
        finally:
            self._busy = False


def _reads(mode: Any, flags: Any) -> bool:
    """Whether an ``open`` event opens for reading: builtin open's mode string, or os.open's flags."""
    if isinstance(mode, str):
        return "r" in mode or "+" in mode
    if isinstance(flags, int):
        return (flags & os.O_ACCMODE) in (os.O_RDONLY, os.O_RDWR)
    return True


def startup_files() -> list[str]:
    """The modules imported before the hook was installed (site, encodings, the script's own imports)."""
    out: list[str] = []
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        for path in (getattr(spec, "cached", None), getattr(module, "__file__", None)):
            if isinstance(path, str):
                out.append(path)
    return out


def mount_points(mountinfo: str) -> set[str]:
    """The mount points in the text of ``/proc/self/mountinfo`` (field 5, octal escapes decoded)."""
    points: set[str] = set()
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def own_mount_points() -> set[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return mount_points(f.read())
    except OSError:
        return set()


def select(paths: list[str], *, since: float, exclude: tuple[str, ...],
           mounted: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], int]:
    """(the existing regular files among ``paths``, resolved, deduplicated, in order; their total size).

    Left out: what is under ``exclude`` (or /proc, /sys, /dev), what is not a regular file, what
    was modified at or after ``since`` (written by the run itself: caches, compiled kernels), and
    files that are mount points themselves (``mounted``): what the engine put into the container
    (the host's NVIDIA driver libraries the NVIDIA Container Toolkit binds in, /etc/hosts), which
    no layer of the image holds."""
    roots = tuple(r.rstrip("/") for r in (*EXCLUDED_ROOTS, *exclude) if r)
    files: dict[str, None] = {}
    total = 0
    for path in paths:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except (OSError, ValueError):
            continue
        if real in files or not stat.S_ISREG(st.st_mode) or st.st_mtime >= since or real in mounted:
            continue
        if any(real == r or real.startswith(r + "/") for r in roots):
            continue
        files[real] = None
        total += st.st_size
    return list(files), total


def first_kernels(torch: Any) -> tuple[str, list[str]]:
    """Run the first kernels a training or inference process runs; returns (device, what ran)."""
    import torch.nn.functional as F  # noqa: N812 - torch's own spelling

    cuda = bool(torch.cuda.is_available())
    device = "cuda" if cuda else "cpu"
    ran: list[str] = []
    if cuda:
        half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        half = torch.bfloat16
    a = torch.randn(256, 256, device=device, dtype=half)
    (a @ a).sum().item()
    ran.append(f"matmul {str(half).replace('torch.', '')}")
    conv_dtype = torch.float16 if cuda else torch.float32
    x = torch.randn(2, 8, 32, 32, device=device, dtype=conv_dtype)
    w = torch.randn(16, 8, 3, 3, device=device, dtype=conv_dtype)
    F.conv2d(x, w, padding=1).sum().item()
    ran.append("conv2d (cuDNN)" if cuda else "conv2d")
    q = torch.randn(2, 4, 64, 64, device=device, dtype=conv_dtype)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item()
    ran.append("scaled_dot_product_attention")
    if cuda:
        torch.cuda.synchronize()
        ran.append("synchronize")
    return device, ran


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="firstrun.py", description="Record the files a first torch run reads.")
    p.add_argument("--json", action="store_true", help="print the record as JSON (the default; kept for symmetry)")
    p.add_argument("--import", dest="imports", default="", metavar="A,B",
                   help="modules to import after torch (comma-separated)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    recorder = Recorder()
    sys.addaudithook(recorder.hook)  # first: everything below is recorded
    since = time.time()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    imports = [m.strip() for m in args.imports.split(",") if m.strip()]
    for path in startup_files():
        recorder.add(path)
    recorder.step()
    out: dict[str, Any] = {"schema": SCHEMA, "python": sys.executable, "device": None, "torch": None,
                           "imports": imports, "kernels": []}
    started = time.monotonic()
    code = EXIT_OK
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        try:
            import torch

            out["torch"] = str(torch.__version__)
            recorder.step()
            for name in imports:
                __import__(name)
                recorder.step()
            out["device"], out["kernels"] = first_kernels(torch)
            if out["device"] == "cuda":
                out["gpu"] = str(torch.cuda.get_device_name(0))
        except BaseException as e:  # noqa: BLE001 - any failure is reported, never a traceback on stdout
            if isinstance(e, KeyboardInterrupt):
                raise
            out["error"] = f"{type(e).__name__}: {e}"
            out["traceback"] = traceback.format_exc(limit=8)
            code = EXIT_FAILED
        finally:
            recorder.step()
            recorder.active = False
    here = os.path.dirname(os.path.realpath(__file__))
    files, total = select(list(recorder.seen), since=since, exclude=(here,), mounted=own_mount_points())
    out["seconds"] = round(time.monotonic() - started, 3)
    out["files"] = files
    out["bytes"] = total
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
