"""``kiln inspect IMAGE``'s "what is big": the final file system's bytes per owning package."""

from __future__ import annotations

from torchkiln.inspect.analyze import owners_from_metadata, package_sizes
from torchkiln.inspect.waste import FileRecord

SITE = "opt/venv/lib/python3.11/site-packages"


def test_bytes_are_summed_per_owning_package_biggest_first_and_unowned_files_count_apart() -> None:
    record = (b"torch/lib/libtorch_cpu.so,sha256=x,400\ntorch/__init__.py,,10\n"
              b"torch-2.13.0+cpu.dist-info/RECORD,,\n")
    owners = owners_from_metadata({
        f"{SITE}/torch-2.13.0+cpu.dist-info/RECORD": record,
        "var/lib/dpkg/status": b"Package: libc6\nVersion: 2.36-9\n",
        "var/lib/dpkg/info/libc6:amd64.list": b"/usr/lib/libc.so.6\n",
    })
    final = {
        f"{SITE}/torch/lib/libtorch_cpu.so": FileRecord(f"{SITE}/torch/lib/libtorch_cpu.so", 1, "file", 400),
        f"{SITE}/torch/__init__.py": FileRecord(f"{SITE}/torch/__init__.py", 1, "file", 10),
        "usr/lib/libc.so.6": FileRecord("usr/lib/libc.so.6", 0, "file", 200),
        "workspace/app.py": FileRecord("workspace/app.py", 2, "file", 50),
        "usr/lib": FileRecord("usr/lib", 0, "dir", 0),
    }
    sizes = package_sizes(final, owners)
    assert [(s.package, s.version, s.bytes, s.files) for s in sizes] == [
        ("torch", "2.13.0+cpu", 410, 2), ("libc6", "2.36-9", 200, 1), (None, None, 50, 1)]
    assert sizes[0].to_dict() == {"package": "torch", "version": "2.13.0+cpu", "bytes": 410, "files": 2}
