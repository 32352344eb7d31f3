"""How long compiling a plan's torch and extensions takes, and how much memory (``kiln explain``,
``kiln resolve``): a pure function of the plan, the knowledge base's CPU-minute figures, and the
cores and memory given. Estimates, not measurements; nothing here renders or builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchkiln.arch import parse_arch_list
from torchkiln.knowledge import Knowledge
from torchkiln.plan import BuildPlan, ExtensionPlan


def compiled(plan: BuildPlan) -> tuple[ExtensionPlan, ...]:
    """The extensions the build compiles (``build = "source"``)."""
    return tuple(e for e in plan.extensions if e.build == "source")


@dataclass(frozen=True)
class BuildEstimate:
    what: str
    archs: int  # device-code targets compiled (SASS and PTX entries)
    jobs: int  # MAX_JOBS the build would use
    per_job_gib: int
    cpu_minutes: int
    wall_minutes: float
    peak_gib: int
    basis: str

    def to_dict(self) -> dict[str, object]:
        return {
            "what": self.what, "archs": self.archs, "jobs": self.jobs, "per_job_gib": self.per_job_gib,
            "cpu_minutes": self.cpu_minutes, "wall_minutes": round(self.wall_minutes, 1),
            "peak_gib": self.peak_gib, "basis": self.basis,
        }


#: a small custom extension (one .cpp binding, one .cu kernel file): examples/ext/my_op took 1.6-2.3
#: CPU-minutes for 8.0;9.0+PTX here, nearly all of it compiling torch's headers in the .cpp file
SMALL_EXTENSION_COST = (2, 0)


def _arch_count(plan: BuildPlan, ext: ExtensionPlan | None, arch_env: str | None) -> int:
    if ext is not None and arch_env and arch_env != "TORCH_CUDA_ARCH_LIST":
        value = dict(ext.env).get(arch_env, "")
        n = len([a for a in re.split(r"[;\s,]+", value) if a])
        if n:
            return n
    return len(parse_arch_list(plan.arch_list)) if plan.arch_list else 1


def _one(what: str, cost: tuple[int, int], archs: int, per_job: int, cores: int, mem_gib: float,
         basis: str) -> BuildEstimate:
    jobs = max(1, min(cores, int(mem_gib // per_job)))
    cpu = cost[0] + cost[1] * archs
    return BuildEstimate(what, archs, jobs, per_job, cpu, cpu / jobs, jobs * per_job, basis)


def estimate_builds(plan: BuildPlan, kb: Knowledge, cores: int, mem_gib: float) -> tuple[BuildEstimate, ...]:
    """Rough build time and peak memory of everything compiled, for ``cores`` CPUs and ``mem_gib`` GiB.

    Model: MAX_JOBS = min(cores, memory / GiB per job); CPU-minutes = base + per-arch × archs
    (knowledge base figures; estimates, not measurements); wall time = CPU-minutes / MAX_JOBS.
    """
    out: list[BuildEstimate] = []
    b = plan.torch.build
    if b is not None and kb.torch_source is not None:
        out.append(_one(
            f"torch {plan.torch.version} from source", kb.torch_source.build_cost,
            _arch_count(plan, None, None), b.memory_per_job_gib, cores, mem_gib,
            "rough knowledge-base estimate, not measured here"))
    for ext in compiled(plan):
        info = kb.extensions.get(ext.name)
        if info is not None and info.build_cost != (0, 0):
            cost, basis = info.build_cost, f"knowledge-base estimate ({info.source})"
        else:
            cost, basis = SMALL_EXTENSION_COST, "small extension (one kernel file), measured on examples/ext/my_op"
        out.append(_one(
            ext.name, cost, _arch_count(plan, ext, info.arch_env if info else None), ext.memory_per_job_gib,
            cores, mem_gib, basis))
    return tuple(out)
