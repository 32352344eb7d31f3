"""The layer plan of a CUDA torch environment: each CUDA library wheel in a layer of its own, below torch.

A CUDA torch set is 3-5 GB of wheels, of which torch itself is a third; the rest are NVIDIA's libraries
(cuBLAS, cuDNN, NCCL, ...) that torch pins exactly and that change far less often than torch: two torch
releases of one CUDA minor usually pin the same cuBLAS, cuFFT or cuSOLVER. In one layer, every torch
release is a new multi-GB layer to push and pull, and a layer that large is pulled (and unpacked) by one
connection. Split by package and ordered from what changes least to what changes most, a node that has
last week's image pulls only the layers that changed, the others in parallel, and two images that pin the
same libraries share those layers in the registry and on the node.

The steps, in the torch stage, before the step that installs torch:

1. the venv; without a lock, the torch set is also resolved here (``uv pip compile``) into a cache mount,
   so the next steps know every pin without that list becoming part of any layer (a list in a layer below
   the libraries would change with every torch release and with it every layer above it);
2. one step per library family of ``FAMILIES``, in that order: the family's pins from the set (the lock's
   hashed pins with ``kiln build --locked``, else the resolved list) installed with ``--no-deps``. A family
   the set does not have (NVSHMEM in an older torch) makes an empty step. The CUDA toolkit's small
   libraries (runtime, NVRTC, CUPTI, NVTX, cuFile, cuRAND: about 0.4 GB together) share one layer: torch's
   ``cuda-toolkit`` requirement pins them together, exactly, and each layer has a cost of its own in a pull.
3. torch's step as without the plan: it installs the whole set, finds the libraries in place and adds
   torch, triton's companions and the small pure-Python dependencies.

Every step stamps its files (render/reproducible.py), so each library's layer has the same digest in every
build of the same pin, on any machine: that is what lets two images share it.
"""

from __future__ import annotations

import hashlib

from torchkiln.contract import UV, VENV
from torchkiln.plan import BuildPlan
from torchkiln.render import instructions as ins
from torchkiln.render import project as proj
from torchkiln.render import reproducible

#: (family, the requirement-line pattern for grep -iE) in layer order: the CUDA toolkit's small libraries in one
#: layer (pinned together by the CUDA minor: they change together, and a layer each would be a dozen layers of a
#: few MB), its large ones one layer each, then the libraries NVIDIA releases on their own schedule, then triton
#: (one per torch minor). Names of CUDA 12 (``nvidia-cublas-cu12``) and CUDA 13 (``nvidia-cublas``) alike.
_SUFFIX = "([-_.]cu[0-9]+)?=="
_SMALL = ("cuda-runtime", "cuda-nvrtc", "cuda-cupti", "nvtx", "cufile", "curand")


def _names(*names: str) -> str:
    alternatives = "|".join(n.replace("-", "[-_.]") for n in names)
    return f"^nvidia[-_.]({alternatives}){_SUFFIX}" if len(names) > 1 else f"^nvidia[-_.]{alternatives}{_SUFFIX}"


FAMILIES: tuple[tuple[str, str], ...] = (
    ("cuda-toolkit-libraries", _names(*_SMALL)),
    # nvJitLink after the toolkit's pinned libraries: cuda-toolkit (13.0.3) pins every other one exactly
    # (``==13.0.96.*``) but it as a range (``>=13.0.88,<14``), so it moves with NVIDIA's releases
    *((name, _names(name)) for name in ("cusparse", "cusolver", "cufft", "cublas", "nvjitlink", "cudnn", "cusparselt",
                                        "nccl", "nvshmem")),
    ("triton", "^triton=="),
)

#: where steps 2 read the resolved set when there is no lock (a cache mount: in no layer)
SET_DIR = "/kiln/torch-set"
SET_FILE = f"{SET_DIR}/requirements.txt"
#: one family's pins, for the length of a step
_PINS = "/tmp/kiln-layer.txt"
_CACHE = "/tmp/kiln-uv-torch"


def split_torch(plan: BuildPlan) -> bool:
    """Whether the torch stage gets the plan: a CUDA torch from wheels (a torch built from source is one
    wheel of torch's own; a CPU set has no CUDA libraries)."""
    return plan.torch.cuda is not None and plan.torch.build is None and plan.torch.image is None


def _locked(plan: BuildPlan) -> bool:
    """The torch set is known before the build: the lock's pins, or a project lock that pins torch."""
    return plan.locked is not None or proj.torch_requirements(plan) is not None


def _set_mount(plan: BuildPlan) -> str:
    """The cache mount of the resolved set, one per torch requirements, interpreter and platform."""
    key = "\n".join([plan.torch.requirement, *plan.torch.companions, plan.python_exe, plan.platform])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"type=cache,id=kiln-torch-set-{digest},target={SET_DIR},sharing=locked"


def _mounts(plan: BuildPlan) -> list[str]:
    source = [ins.bind("requirements-torch.txt")] if _locked(plan) else [_set_mount(plan)]
    return [*(m for m in ins.SOURCE_MOUNTS if m != ins.UV_CACHE_MOUNT), *source]


def _hashes(plan: BuildPlan) -> str:
    return " --require-hashes" if plan.locked is not None or proj.torch_require_hashes(plan) else ""


def library_steps(plan: BuildPlan) -> list[str]:
    """The venv step and one step per library family (see the module's docstring)."""
    py = f"{VENV}/bin/python"
    source = "/kiln/requirements-torch.txt" if _locked(plan) else SET_FILE
    # uv's cache in a folder removed afterwards: `uv venv` caches what it learnt of the interpreter, keyed by
    # the interpreter file's ctime (when the daemon unpacked the base), so that entry differs from one
    # machine to the next and kept this layer apart across daemons (measured: the only differing file)
    venv = [". /kiln/sources.sh", f"UV_CACHE_DIR={_CACHE} {UV} venv --python {plan.python_exe} {VENV}",
            "mkdir -p /etc/pip"]  # stamp's roots
    if not _locked(plan):
        venv += [f"UV_CACHE_DIR={_CACHE} {UV} pip compile --python {py} --quiet --no-header --no-annotate"
                 f" -o {SET_FILE} /kiln/requirements-torch.txt"]
    venv.append(f"rm -rf {_CACHE}")
    lines = [
        "# the CUDA libraries torch pins, each in a layer of its own below torch's, from what changes least to what",
        "# changes most: an image of the next torch that pins the same libraries shares these layers "
        "(render/layer_plan.py)",
        *ins.run([*_mounts(plan), *([ins.bind("requirements-torch.txt")] if not _locked(plan) else [])],
                 [*venv, reproducible.stamp()]),
    ]
    bytecode = 1 if plan.bytecode == "all" else 0
    for _name, pattern in FAMILIES:
        lines += ins.run(_mounts(plan), [
            ". /kiln/sources.sh",
            f"export UV_CACHE_DIR={_CACHE} UV_LINK_MODE=hardlink UV_COMPILE_BYTECODE={bytecode}",
            f"{{ grep -iE '{pattern}' {source} || true; }} > {_PINS}",
            f"if [ -s {_PINS} ]; then {UV} pip install --python {py} --no-deps{_hashes(plan)} -r {_PINS}; fi",
            f"rm -rf {_CACHE} {_PINS}",
            reproducible.stamp(),
        ])
    return lines
