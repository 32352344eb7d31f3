"""CUDA forward compatibility (``[gpu] forward_compat``): when NVIDIA's cuda-compat package lets an image of
a newer CUDA major run on an older driver branch, and the container-start logic that switches it on.

The rules are NVIDIA's (``knowledge/cuda.toml``, source FWD): data-center GPUs (and Jetson) only, never
GeForce/RTX desktop cards; a supported base branch per CUDA major; the kernel driver must still know each
GPU. Pure: no I/O beyond reading the packaged knowledge.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

#: where the image keeps the compat libraries (NVIDIA's own images use the same folder)
COMPAT_DIR = "/usr/local/cuda/compat"
#: the script that puts them first on the library path at container start, when the host driver is older
ENTRYPOINT = "/usr/local/bin/kiln-cuda-compat"


@dataclass(frozen=True)
class CompatRule:
    cuda_major: str
    min_driver: str
    branches: str
    require: str
    source: str


@dataclass(frozen=True)
class CompatFacts:
    rules: dict[str, CompatRule]
    images: dict[str, str]  # CUDA minor -> NVIDIA image carrying cuda-compat
    gpus: frozenset[str]  # normalised names
    source: str


def _norm(name: str) -> str:
    n = re.sub(r"^(nvidia\s+)?(tesla\s+|geforce\s+|quadro\s+)?", "", name.lower().strip())
    return re.sub(r"[\s_-]+", "", n)


@cache
def compat_facts() -> CompatFacts:
    data = tomllib.loads(resources.files("torchkiln.knowledge").joinpath("cuda.toml").read_text(encoding="utf-8"))
    rules = {r["cuda_major"]: CompatRule(r["cuda_major"], r["min_driver"], r["branches"], r["require"], r["source"])
             for r in data.get("forward_compat", [])}
    gpus = data.get("forward_compat_gpus", {})
    return CompatFacts(rules, dict(data.get("forward_compat_images", {})),
                       frozenset(_norm(n) for n in gpus.get("names", [])), gpus.get("source", "FWD"))


def eligible(name: str) -> bool:
    """A data-center GPU (or Jetson) that NVIDIA's forward compatibility supports."""
    return _norm(name) in compat_facts().gpus


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def compat_problems(cuda: str, min_driver: str, target_names: list[str]) -> list[str]:
    """Why forward compatibility cannot run CUDA ``cuda`` on driver ``min_driver`` for these targets (empty: it can)."""
    facts = compat_facts()
    rule = facts.rules.get(cuda.split(".")[0])
    out: list[str] = []
    if rule is None:
        return [f"NVIDIA's forward compatibility has no rule torchkiln knows for CUDA {cuda}"]
    if _key(min_driver) < _key(rule.min_driver):
        out.append(f"the CUDA {rule.cuda_major} forward-compatibility package supports base drivers from "
                   f"{rule.min_driver} ({rule.branches}), not {min_driver}")
    if not target_names:
        out.append("forward compatibility runs on data-center GPUs only, so it needs [gpu] targets that name them")
    not_dc = [n for n in target_names if not eligible(n)]
    if not_dc:
        out.append(f"forward compatibility is for NVIDIA data-center GPUs (and Jetson) only, not {', '.join(not_dc)}")
    if cuda not in facts.images:
        out.append(f"no NVIDIA image of CUDA {cuda} that carries its cuda-compat package is known to torchkiln")
    return out


def entrypoint_script(cuda: str) -> str:
    """The container-start script: the compat libcuda first on the library path only when the host driver is
    older than the driver the compat libraries come from, so it never shadows a newer host driver."""
    return f"""#!/bin/sh
# Written by torchkiln ([gpu] forward_compat). CUDA forward compatibility (NVIDIA CUDA Compatibility guide,
# "Forward Compatibility"): {COMPAT_DIR} holds the cuda-compat libraries of CUDA {cuda}. They are put first
# on the library path only when the host's kernel driver is older than the driver they come from; with a
# newer host driver nothing changes. KILN_CUDA_COMPAT=0 turns it off, =1 forces it on.
compat=${{KILN_CUDA_COMPAT_DIR:-{COMPAT_DIR}}}
lib=$(ls "$compat"/libcuda.so.*.* 2>/dev/null | head -n 1)
ours=${{lib##*/libcuda.so.}}
version_file=${{KILN_DRIVER_VERSION_FILE:-/proc/driver/nvidia/version}}
host=$(grep -o '[0-9][0-9][0-9]*\\.[0-9][0-9]*\\(\\.[0-9][0-9]*\\)\\{{0,1\\}}' "$version_file" 2>/dev/null | head -n 1)
use=0
case "${{KILN_CUDA_COMPAT:-auto}}" in
  1) use=1 ;;
  0) use=0 ;;
  *) if [ -n "$ours" ] && [ -n "$host" ] && [ "$host" != "$ours" ] \\
        && [ "$(printf '%s\\n%s\\n' "$host" "$ours" | sort -V | head -n 1)" = "$host" ]; then use=1; fi ;;
esac
if [ "$use" = 1 ] && [ -n "$lib" ]; then
  export LD_LIBRARY_PATH="$compat${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
fi
exec "$@"
"""
