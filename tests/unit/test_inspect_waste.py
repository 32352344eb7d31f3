"""Waste classification over synthetic layer file lists (no archives needed)."""

from __future__ import annotations

from typing import Literal

from torchkiln.inspect.waste import FileRecord, LayerFiles, find_waste, merge_layers

FileType = Literal["file", "dir", "symlink", "hardlink", "other"]


def layer(index: int, *files: tuple[str, int] | tuple[str, int, FileType], whiteouts: tuple[str, ...] = (),
          opaque: tuple[str, ...] = ()) -> LayerFiles:  # fmt: skip
    lf = LayerFiles(index)
    for f in files:
        kind: FileType = f[2] if len(f) == 3 else "file"  # type: ignore[misc]
        lf.records.append(FileRecord(f[0], index, kind, f[1] if kind == "file" else 0))
    lf.whiteouts += [(w, "file") for w in whiteouts]
    lf.whiteouts += [(o, "opaque") for o in opaque]
    return lf


def items(report: object, category: str) -> dict[str, tuple[int, int, int, int | None]]:
    cat = report.category(category)  # type: ignore[attr-defined]
    return {} if cat is None else {i.path: (i.bytes, i.files, i.layer, i.removed_in) for i in cat.items}


def test_deleted_file_and_tree() -> None:
    report = find_waste(
        [
            layer(0, ("big.bin", 1_000_000), ("build", 0, "dir"), ("build/a.o", 300), ("build/sub/b.o", 200)),
            layer(1, ("keep", 5)),
            layer(2, whiteouts=("big.bin", "build")),
        ]
    )
    assert items(report, "deleted") == {"big.bin": (1_000_000, 1, 0, 2), "build": (500, 2, 0, 2)}
    assert "big.bin" not in report.final and "build/a.o" not in report.final and "keep" in report.final
    assert report.per_layer == {0: 1_000_500}
    assert report.total == 1_000_500


def test_whiteout_touches_only_lower_layers() -> None:
    # the same layer deletes the old file and writes a new one at the same path
    report = find_waste([layer(0, ("etc/conf", 100)), layer(1, ("etc/conf", 7), whiteouts=("etc/conf",))])
    assert report.final["etc/conf"].size == 7
    assert items(report, "deleted") == {"etc/conf": (100, 1, 0, 1)}
    assert items(report, "overwritten") == {}


def test_opaque_directory_hides_lower_contents_but_keeps_its_own() -> None:
    report = find_waste(
        [
            layer(0, ("opt/app", 0, "dir"), ("opt/app/old.py", 40), ("opt/app-other/x", 9)),
            layer(1, ("opt/app", 0, "dir"), ("opt/app/new.py", 30), opaque=("opt/app",)),
        ]
    )
    assert set(report.final) == {"opt/app", "opt/app/new.py", "opt/app-other/x"}
    assert items(report, "deleted") == {"opt/app/": (40, 1, 0, 1)}


def test_overwritten_and_directory_replaced_by_a_file() -> None:
    report = find_waste(
        [
            layer(0, ("usr/lib/libx.so", 5000), ("data", 0, "dir"), ("data/a", 11), ("data/b", 22)),
            layer(1, ("usr/lib/libx.so", 6000), ("data", 3, "file")),
        ]
    )
    assert items(report, "overwritten") == {"usr/lib/libx.so": (5000, 1, 0, 1)}
    assert items(report, "deleted") == {"data": (33, 2, 0, 1)}
    assert report.final["data"].type == "file"


def test_caches_and_apt() -> None:
    report = find_waste(
        [
            layer(
                0,
                ("root/.cache/pip/http/a/b", 300),
                ("root/.cache/pip/wheels/c.whl", 700),
                ("home/kiln/.cache/uv/archive-v0/x", 50),
                ("var/lib/apt/lists/deb_Packages", 123),
                ("var/lib/apt/lists/lock", 0),
                ("var/cache/apt/archives/curl_1.deb", 80),
                ("var/cache/apt/pkgcache.bin", 60),
                ("opt/conda/conda-meta/numpy-1.json", 10),
                ("opt/conda/pkgs/numpy-1.tar.bz2", 900),
                ("opt/conda/lib/libz.so", 5),
            )
        ]
    )
    assert items(report, "pip-cache") == {"root/.cache/pip": (1000, 2, 0, None)}
    assert items(report, "uv-cache") == {"home/kiln/.cache/uv": (50, 1, 0, None)}
    assert items(report, "apt-lists") == {"var/lib/apt/lists/deb_Packages": (123, 1, 0, None)}
    assert items(report, "apt-cache") == {
        "var/cache/apt/archives/curl_1.deb": (80, 1, 0, None),
        "var/cache/apt/pkgcache.bin": (60, 1, 0, None),
    }
    assert items(report, "conda-cache") == {"opt/conda/pkgs": (900, 1, 0, None)}


def test_pycache_only_outside_python_environments() -> None:
    report = find_waste(
        [
            layer(
                0,
                ("opt/venv/pyvenv.cfg", 10),
                ("opt/venv/lib/python3.11/site-packages/torch/__pycache__/a.cpython-311.pyc", 100),
                ("usr/lib/python3.11/__pycache__/os.cpython-311.pyc", 100),
                ("usr/lib/python3/dist-packages/apt/__pycache__/x.pyc", 100),
                ("src/build_tools/__pycache__/setup.cpython-311.pyc", 42),
                ("src/build_tools/__pycache__/gen.cpython-311.pyc", 8),
            )
        ]
    )
    assert items(report, "pycache") == {"src/build_tools/__pycache__": (50, 2, 0, None)}


def test_tests_of_big_packages_only() -> None:
    sp = "opt/venv/lib/python3.11/site-packages"
    report = find_waste(
        [
            layer(
                0,
                (f"{sp}/big/core.so", 60 << 20),
                (f"{sp}/big/tests/test_a.py", 1000),
                (f"{sp}/big/sub/test/data.bin", 500),
                (f"{sp}/big/testing/helpers.py", 300),  # torch.testing-like public API: kept
                (f"{sp}/small/tests/test_b.py", 400),
            )
        ]
    )
    assert items(report, "tests") == {f"{sp}/big/tests": (1000, 1, 0, None), f"{sp}/big/sub/test": (500, 1, 0, None)}


def test_headers_and_static_libs_only_without_a_compiler() -> None:
    files = (
        ("usr/local/cuda/include/cuda.h", 1000),
        ("usr/local/cuda/include/crt/host.hpp", 200),
        ("usr/local/cuda/lib64/libcudart_static.a", 5000),
        ("opt/venv/lib/python3.11/site-packages/torch/include/ATen/ATen.h", 77),
    )
    runtime = find_waste([layer(0, *files)])
    assert items(runtime, "headers") == {
        "usr/local/cuda/include": (1200, 2, 0, None),
        "opt/venv/lib/python3.11/site-packages/torch/include": (77, 1, 0, None),
    }
    assert items(runtime, "static-libs") == {"usr/local/cuda/lib64/libcudart_static.a": (5000, 1, 0, None)}
    assert runtime.compiler is None

    devel = find_waste([layer(0, *files, ("usr/local/cuda/bin/nvcc", 100))])
    assert devel.category("headers") is None and devel.category("static-libs") is None
    assert devel.compiler == "usr/local/cuda/bin/nvcc"
    gcc = find_waste([layer(0, *files, ("usr/bin/x86_64-linux-gnu-gcc-12", 10))])
    assert gcc.compiler == "usr/bin/x86_64-linux-gnu-gcc-12"


def test_cuda_libraries_present_twice() -> None:
    sp = "opt/venv/lib/python3.11/site-packages"
    report = find_waste(
        [
            layer(
                0,
                ("usr/local/cuda-12.4/lib64/libcublas.so.12.4.5.8", 100_000),
                ("usr/local/cuda-12.4/lib64/libcublas.so.12", 0, "symlink"),
                ("usr/local/cuda-12.4/lib64/libcufft.so.11.2.1", 50_000),  # only here: not a duplicate
                ("usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.1.0", 70_000),
            ),
            layer(
                1,
                (f"{sp}/nvidia/cublas/lib/libcublas.so.13", 120_000),
                (f"{sp}/nvidia/cudnn/lib/libcudnn_ops.so.9", 80_000),
                (f"{sp}/torch/lib/libcublas.so.13", 1),  # not a wheel of nvidia: ignored as the "wheel" copy
            ),
        ]
    )
    assert items(report, "duplicate-cuda") == {
        "usr/local/cuda-12.4/lib64/libcublas.so.12.4.5.8": (100_000, 1, 0, None),
        "usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.1.0": (70_000, 1, 0, None),
    }


def test_each_byte_is_counted_once() -> None:
    # a pip cache that a later layer deletes is "deleted", not also "pip-cache"
    report = find_waste([layer(0, ("root/.cache/pip/x", 10)), layer(1, whiteouts=("root/.cache",))])
    assert items(report, "deleted") == {"root/.cache": (10, 1, 0, 1)}
    assert report.category("pip-cache") is None
    assert report.total == 10


def test_merge_layers_without_accounting() -> None:
    final = merge_layers([layer(0, ("a", 1), ("b", 2)), layer(1, ("a", 3), whiteouts=("b",))])
    assert {p: r.size for p, r in final.items()} == {"a": 3}


def test_to_dict_caps_items() -> None:
    report = find_waste([layer(0, *[(f"var/lib/apt/lists/f{i}", i + 1) for i in range(300)])])
    cat = report.category("apt-lists")
    assert cat is not None
    d = cat.to_dict(max_items=10)
    assert d["items_total"] == 300 and len(d["items"]) == 10  # type: ignore[arg-type]
    assert d["items"][0] == {  # type: ignore[index]
        "path": "/var/lib/apt/lists/f299",
        "bytes": 300,
        "files": 1,
        "layer": 0,
        "removed_in": None,
    }
