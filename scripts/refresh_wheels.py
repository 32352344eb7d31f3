"""Write src/torchkiln/knowledge/wheels.toml: the download size and the dependencies of PyPI packages.

KL002 (a pip cache left in a layer) reports a cache by its size: `pip install einops` leaves a
40 KB wheel, `pip install torch` GBs. The lint runs offline, so the sizes come from this table, made
here from PyPI's JSON API (https://pypi.org/pypi/NAME/json, the latest release): for each package
the file pip would download on Linux x86_64 for CPython 3.11 (a cp311 or abi3 manylinux wheel, else
a pure-Python wheel, else the largest manylinux x86_64 wheel, else the sdist) and its unconditional
dependencies (``Requires-Dist`` without an extra, markers evaluated for that platform). The table
holds the seed packages below (installers, build tools and the packages ML Dockerfiles install,
drawn from the projects' own install instructions), the names given on the command line, and every
dependency they reach, so that the size of an install can be summed over its closure.

    .venv/bin/python scripts/refresh_wheels.py --names scripts/wheels-names.txt [--out PATH]

A package's size is its latest release's, and the largest over the releases since 2021 beside it
(a pin to an older release can be far bigger: xformers 0.0.23's CUDA wheel ~200 MB, 0.0.35's 3 MB);
its dependencies are the latest release's. The rule compares orders of magnitude (a few MB against
GBs), which a version changes less than that.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "torchkiln" / "knowledge" / "wheels.toml"

#: what ML, CUDA and serving Dockerfiles install by name (with their dependencies reached from here)
SEEDS = """
pip setuptools wheel packaging ninja pybind11 setuptools-scm build hatchling flit-core poetry-core
cython cmake scikit-build scikit-build-core meson meson-python uv poetry pipx virtualenv pdm hatch
torch torchvision torchaudio triton xformers flash-attn deepspeed accelerate transformers diffusers
datasets tokenizers safetensors huggingface-hub peft trl bitsandbytes sentencepiece tiktoken einops
timm open-clip-torch lightning pytorch-lightning torchmetrics fairscale apex vllm sglang flashinfer-python
onnx onnxruntime onnxruntime-gpu onnxsim tensorrt tritonclient nvidia-pyindex nvidia-ml-py pynvml
gpustat cupy-cuda12x numba llvmlite jax jaxlib tensorflow tensorflow-cpu keras tf-keras tensorboard
tensorboardx wandb mlflow comet-ml clearml neptune optuna ray hydra-core omegaconf
numpy scipy pandas polars pyarrow scikit-learn scikit-image matplotlib seaborn plotly pillow
opencv-python opencv-python-headless opencv-contrib-python opencv-contrib-python-headless imageio
imageio-ffmpeg av ffmpeg-python soundfile librosa pydub moviepy kornia albumentations shapely
open3d trimesh pyrender plyfile h5py zarr netcdf4 xarray pydicom nibabel simpleitk monai
networkx sympy mpmath nltk spacy gensim jieba pypinyin regex ftfy langchain openai anthropic
gradio streamlit fastapi uvicorn gunicorn flask starlette pydantic httpx aiohttp requests
jupyter jupyterlab notebook ipython ipykernel ipywidgets jupyter-archive jupyterlab-widgets
pytest pytest-cov flake8 black isort mypy ruff pre-commit pylint yapf cpplint
boto3 botocore awscli google-cloud-storage azure-storage-blob s3fs gcsfs fsspec
tqdm rich click typer fire pyyaml toml tomli six attrs loguru colorama termcolor tabulate easydict
addict yacs protobuf grpcio psutil gitpython dill cloudpickle joblib absl-py jsonlines ujson orjson
msgpack future decorator wrapt ipdb iopath portalocker fvcore supervisor pytz python-dateutil
filelock natsort python-dotenv ruamel-yaml pyparsing py-cpuinfo wget gdown typing-extensions
mmengine mmcv openmim mmdet ultralytics supervision roboflow segment-anything pycocotools
lmdb shapely pyclipper rapidfuzz editdistance imgaug numexpr setproctitle gym gymnasium
stable-baselines3 mujoco pygame pybullet nerfacc kaolin torch-geometric torch-scatter
torch-sparse torch-cluster pyg-lib dgl einx jaxtyping beartype
""".split()

ENV = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
       "os_name": "posix", "python_version": "3.11", "python_full_version": "3.11.9",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def fetch(name: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=30) as r:
            return json.load(r)
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError):
        return None


def pick_size(files: list[dict]) -> float | None:
    """MB of the file pip would download for CPython 3.11 on manylinux x86_64."""
    def size_of(pred) -> int | None:
        sizes = [f["size"] for f in files if f["filename"].endswith(".whl") and pred(f["filename"])]
        return max(sizes) if sizes else None

    def linux(fn: str) -> bool:
        return ("manylinux" in fn or "linux_x86_64" in fn) and "x86_64" in fn

    for pred in (lambda fn: linux(fn) and "-cp311-" in fn,
                 lambda fn: linux(fn) and "-abi3-" in fn,
                 lambda fn: "-none-any" in fn,
                 linux):
        s = size_of(pred)
        if s is not None:
            return round(s / 1e6, 1)
    sdists = [f["size"] for f in files if f.get("packagetype") == "sdist"]
    return round(max(sdists) / 1e6, 1) if sdists else None


#: releases uploaded before this are left out of a package's largest size (Python 3.6-era wheels)
SINCE = "2021-01-01"


def largest_size(releases: dict[str, list[dict]], latest: list[dict]) -> float | None:
    """The largest download of any release since `SINCE` (an older pin can be far bigger than the
    latest: xformers 0.0.23's CUDA wheel ~200 MB, 0.0.35's 3 MB), or the latest's."""
    sizes = [pick_size(files) for files in releases.values()
             if files and min(f.get("upload_time_iso_8601", "") for f in files) >= SINCE]
    sizes = [s for s in sizes if s is not None] or [pick_size(latest)]
    return max((s for s in sizes if s is not None), default=None)


def _applying(info: dict) -> list[Requirement]:
    """The latest release's unconditional requirements (markers evaluated for CPython 3.11 on Linux x86_64)."""
    out = []
    for text in info.get("requires_dist") or ():
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or _applies(req.marker):
            out.append(req)
    return out


def _applies(marker: Marker) -> bool:
    try:
        return marker.evaluate({**ENV, "extra": ""})
    except Exception:  # noqa: BLE001 - a marker packaging cannot evaluate
        return True


def pins(info: dict) -> list[str]:
    """The dependencies the latest release pins to one version (vllm: torch==2.9.0): installed into an
    image with another version, pip downloads the pinned one too."""
    return sorted({canonicalize_name(r.name) for r in _applying(info)
                   if any(sp.operator in ("==", "===") and "*" not in sp.version for sp in r.specifier)})


def deps(info: dict, files: list[dict]) -> list[str] | None:
    """The unconditional dependencies; None when they are not known: a release of sdists only, whose
    setup.py may declare them when it runs (PyPI's requires_dist is empty then). A release with a
    wheel has them in its metadata (none listed: none)."""
    if not any(f["filename"].endswith(".whl") for f in files) and not info.get("requires_dist"):
        return None
    return sorted({canonicalize_name(r.name) for r in _applying(info)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=Path, help="a file of further package names, one per line")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--max", type=int, default=4000, help="stop expanding dependencies past this many packages")
    args = ap.parse_args()
    todo = {canonicalize_name(n) for n in SEEDS}
    if args.names:
        todo |= {canonicalize_name(n) for n in args.names.read_text().split() if n and not n.startswith("#")}
    table: dict[str, tuple[float, float, list[str] | None, bool, list[str]]] = {}
    missing: set[str] = set()
    with cf.ThreadPoolExecutor(16) as pool:
        while todo and len(table) < args.max:
            batch = sorted(todo)
            todo = set()
            for name, data in zip(batch, pool.map(fetch, batch), strict=True):
                if data is None:
                    missing.add(name)
                    continue
                latest = data.get("urls") or []
                size = pick_size(latest)
                most = largest_size(data.get("releases") or {}, latest)
                if size is None or most is None:
                    missing.add(name)
                    continue
                wheel = any(f["filename"].endswith(".whl") for f in latest)
                d = deps(data["info"], latest)
                table[name] = (size, max(most, size), d, not wheel, pins(data["info"]))
                todo |= {x for x in d or () if x not in table and x not in missing}
            print(f"{len(table)} packages, {len(todo)} to fetch", file=sys.stderr)
    lines = [
        "# PyPI packages for KL002's cache sizes: mb, the file pip takes for CPython 3.11 on Linux x86_64",
        f"# from the latest release (max: the largest over the releases since {SINCE}, for a pinned older",
        "# release, where larger); deps, the latest release's unconditional dependencies",
        "# (absent: not known, as for an sdist whose setup.py declares them when it runs); sdist, the latest",
        "# release has no wheel (pip builds one and caches it); pins, the dependencies it pins to one version.",
        "# Made by scripts/refresh_wheels.py from PyPI's",
        f"# JSON API on {dt.date.today().isoformat()} (latest releases); rerun it to refresh. {len(table)} packages.",
        "",
    ]
    for name in sorted(table):
        size, most, d, sdist, pinned = table[name]
        tail = (f", max = {most}" if most > size else "") + ("" if d is None else f", deps = {json.dumps(d)}")
        tail += (", sdist = true" if sdist else "") + (f", pins = {json.dumps(pinned)}" if pinned else "")
        lines.append(f"{json.dumps(name)} = {{ mb = {size}{tail} }}")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({len(table)} packages; not found: {len(missing)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
