"""resolve: ``Spec × Knowledge → BuildPlan`` or a ``ResolveError``. Pure: no I/O, no clock.

The checks run before anything is built, in this order: GPU names, the image platform (the
targets' host CPUs: Grace superchips are Arm), torch version × platform × Python, CUDA variant ×
GPU coverage on that platform (the "no kernel image is available" failure), variant × driver floor,
extensions × targets × torch. When nothing works the error says what is wrong, why, and what
would work instead (found by searching the knowledge base for the nearest combination that passes).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchkiln.arch import coverage, format_arch_list, parse_arch_list
from torchkiln.errors import KilnError, ResolveError
from torchkiln.knowledge import (
    OCI_PLATFORM,
    Knowledge,
    ReleasePlatform,
    TorchRelease,
    cuda_key,
    free_threaded,
    python_key,
)
from torchkiln.plan import (
    BuildPlan,
    Decision,
    ExtensionPlan,
    PrunePlan,
    SourcesPlan,
    TargetPlan,
    ToolchainPlan,
    TorchBuildPlan,
    TorchPlan,
)
from torchkiln.resolve.base import FREE_THREADED_BASE, PYTHON_INSTALL_DIR, distro_of, official_python_image
from torchkiln.resolve.companions import (
    companion_decisions,
    companion_ideas,
    companion_problems,
    companion_requirements,
)
from torchkiln.resolve.compat import compat_facts, compat_problems, eligible
from torchkiln.resolve.ext import (
    _SUGGESTING,
    Patch,
    _base_image_cuda,
    _Candidate,
    _extension_plan,
    _extension_problems,
    _host,
    _patched,
    _Target,
    _targets,
    app_plan,
    driver_key,
    step_plans,
)
from torchkiln.spec import Spec

if TYPE_CHECKING:
    from torchkiln.image_facts import ImageFacts
    from torchkiln.project import ProjectFacts


def _variant_name(cuda: str) -> str:
    return "cpu" if cuda == "cpu" else "cu" + cuda.replace(".", "")


def _versions(spec: Spec, kb: Knowledge) -> list[str]:
    """Candidate torch versions, newest first."""
    text = spec.torch.version
    known = kb.all_patches()
    if not text:
        return known
    try:
        exact = Version(text)
    except Exception:
        exact = None
    if exact is not None and str(exact) not in known and len(exact.release) == 2:
        series = kb.release_of(f"{exact}.0")  # "2.9": the series, i.e. its newest patch that passes every check
        if series is not None and series.series == str(exact):
            return sorted(series.patches, key=Version, reverse=True)
    if exact is not None:
        if str(exact) not in known:
            series = kb.release_of(str(exact))
            near = series.patches if series else known[:5]
            newer = Version(known[0]) < exact
            raise ResolveError(
                f"torch {text} is not a release torchkiln knows (known: {', '.join(near)})"
                + (f"; it is newer than every row torchkiln has{' and its local overlay has' if kb.overlay else ''}"
                   if newer else "") + ".",
                hint=("Run `kiln knowledge update` (online: it reads the configured package indexes and learns "
                      "the releases they have, into torchkiln's cache), then resolve again; or pin "
                      f"{known[0]}, the newest known." if newer else
                      "Pin a known version, or use a specifier such as '>=2.5,<2.7' to let torchkiln choose."),
            )
        return [str(exact)]
    spec_set = SpecifierSet(text)
    matches = [v for v in known if Version(v) in spec_set]
    if not matches:
        raise ResolveError(
            f"no known torch release satisfies {text!r} (newest known: {known[0]}, oldest: {known[-1]}).",
            hint="Widen the specifier, or pin one of the known releases.",
        )
    return matches


def _cuda_options(spec: Spec, release: TorchRelease, host: str) -> list[str]:
    cuda = spec.torch.cuda
    if cuda == "cpu":
        return ["cpu"]
    if cuda != "auto":
        return [cuda]
    plat = release.on(host)
    if plat is None:
        return [release.default_cuda]  # fails with "no wheels for this platform"
    stable = [v for v in plat.variants if v not in plat.variants_experimental]
    # the plain-install default first (no extra index needed), then newest CUDA first
    first = [plat.default_cuda] if plat.default_cuda != "cpu" else []
    rest = sorted((v for v in stable if v != plat.default_cuda), key=cuda_key, reverse=True)
    return [*first, *rest] or [""]  # "": no CUDA wheels on this platform (a problem of its own)


def _source_problems(c: _Candidate, spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    """Why building this torch from source fails: the official wheels' variants and archs do not matter."""
    problems: list[str] = []
    py = spec.python.version
    if py not in c.release.python:
        problems.append(f"torch {c.version} does not support Python {py} (it supports {', '.join(c.release.python)})")
    if kb.torch_source is None:
        problems.append("the knowledge base has no recipe for building torch from source")
    toolkit = kb.toolkit_max_target(c.cuda)
    if toolkit is None:
        problems.append(f"CUDA {c.cuda} is older than every toolkit torchkiln knows")
    else:
        lo, hi = toolkit
        for t in targets:
            if not lo <= t.capability <= hi:
                problems.append(f"CUDA {c.cuda} cannot compile for {t.name} (compute capability {t.capability}; "
                                f"it targets {lo} to {hi})")
            elif (why := _toolkit_lacks(kb, c.cuda, t.capability)) is not None:
                problems.append(f"CUDA {c.cuda} cannot compile for {t.name}: {why}")
    floor, _ = kb.driver_floor(c.cuda)
    if spec.gpu.forward_compat:
        problems += _compat_problems(c.cuda, spec, targets)
    elif spec.gpu.min_driver is not None and driver_key(spec.gpu.min_driver) < driver_key(floor):
        problems.append(
            f"CUDA {c.cuda} needs driver {floor} or newer, but the image must run on driver {spec.gpu.min_driver}"
        )
    return problems + _gpu_driver_problems(spec, targets, kb)


def _compat_problems(cuda: str, spec: Spec, targets: tuple[_Target, ...]) -> list[str]:
    """``[gpu] forward_compat = true``: why NVIDIA's cuda-compat cannot carry CUDA ``cuda`` here (empty: it can)."""
    rule = compat_facts().rules.get(cuda.split(".")[0])
    driver = spec.gpu.min_driver or (rule.min_driver if rule else "0")
    return [f"[gpu] forward_compat: {p}" for p in compat_problems(cuda, driver, [t.name for t in targets])]


def _toolkit_lacks(kb: Knowledge, cuda: str, capability: object) -> str | None:
    """Why a CUDA toolkit inside its (oldest, newest) range still has no code generator for an architecture:
    the architecture arrived with a later toolkit (sm_110: CUDA 13.0; sm_103, sm_121: 12.9), else None."""
    first = kb.arch_first_cuda.get(str(capability))
    if first is not None and cuda_key(cuda) < cuda_key(first[0]):
        sm = str(capability).replace(".", "")
        return f"compute capability {capability} (sm_{sm}) is first known to CUDA {first[0]}"
    return None


def _gpu_driver_floors(targets: tuple[_Target, ...], kb: Knowledge) -> list[tuple[_Target, str, str, str]]:
    """(target, driver, CUDA, source) for each target whose architecture needs a newer driver than
    CUDA 11.7's (Ada and Hopper: R520, Blackwell: R570, ...)."""
    out = []
    for t in targets:
        floor = kb.gpu_driver_floor(t.capability)
        if floor is not None:
            out.append((t, *floor))
    return out


def _gpu_driver_problems(spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    """Targets the spec's ``min_driver`` cannot run at all, whatever the image holds."""
    if spec.gpu.min_driver is None:
        return []
    out = [f"{t.name} needs driver {driver} or newer (the first driver that knows compute capability "
           f"{t.capability}, shipped with CUDA {cuda}), but the image must run on driver {spec.gpu.min_driver}"
           for t, driver, cuda, _src in _gpu_driver_floors(targets, kb)
           if driver_key(spec.gpu.min_driver) < driver_key(driver)]
    affected = {t.name for t, driver, _c, _s in _gpu_driver_floors(targets, kb)
                if driver_key(spec.gpu.min_driver) < driver_key(driver)}
    others = [t.name for t in targets if t.name not in affected]
    if out and others:
        out.append(f"[gpu] min_driver is the floor of the whole image, and only {', '.join(sorted(affected))} "
                   f"cannot run on driver {spec.gpu.min_driver}: the nodes with {', '.join(others)} keep running "
                   f"it there (build {', '.join(sorted(affected))} into an image of its own, e.g. a [matrix] gpu "
                   "axis, or drop it from this one)")
    return out


def _problems(c: _Candidate, spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    """Why this candidate fails (empty = it works)."""
    if spec.torch.source == "git" and c.cuda != "cpu":
        return _source_problems(c, spec, targets, kb)
    problems: list[str] = []
    rel = c.release
    plat = c.on
    py = spec.python.version
    if plat is None:
        return [f"torch {c.version} has no wheels for {c.host} ({OCI_PLATFORM[c.host]}) that torchkiln knows"]
    where = "" if c.host == "x86_64" else f" {c.host}"
    if py not in plat.pythons(c.version):
        problems.append(_python_problem(c, py, kb))
    if c.cuda == "cpu":
        if targets:
            problems.append("the CPU build of torch runs no GPU kernels, but [gpu] targets are set")
        return problems
    if c.cuda == "":
        problems.append(f"torch {c.version} has no CUDA wheels for {c.host} ({OCI_PLATFORM[c.host]}), only CPU builds")
        return problems
    since = plat.variants_from.get(c.cuda)
    if since is not None and Version(c.version) < Version(since):
        problems.append(f"torch {c.version} has no {_variant_name(c.cuda)} wheels (that variant starts with {since})")
        return problems
    if c.cuda not in plat.variants:
        problems.append(
            f"torch {c.version} is not built for CUDA {c.cuda}{' on ' + c.host if where else ''} "
            f"(its{where} variants: {', '.join('cu' + v.replace('.', '') for v in plat.variants if v != 'cpu')})"
        )
        return problems
    row = kb.arch_row(rel.series, c.cuda, c.host)
    if targets and row is None:
        problems.append(
            f"the architecture list of torch {rel.series} {_variant_name(c.cuda)}{where} wheels is not confirmed, "
            "so coverage of the targets cannot be checked"
        )
    elif row is not None:
        for t in targets:
            cov = coverage(t.capability, row.entries)
            if not cov.covered:
                problems.append(
                    f"torch {c.version} {_variant_name(c.cuda)}{where} has no kernel image for {t.name} "
                    f"(compute capability {t.capability}): its wheels carry {row.arch_list or 'nothing'}"
                    f"{'' if any(e.kind == 'ptx' for e in row.entries) else ' and no PTX'}"
                )
    floor, _ = kb.driver_floor(c.cuda)
    if spec.gpu.forward_compat:  # the compat libcuda is CUDA {c.cuda}'s own driver: floor and PTX JIT are its
        problems += _compat_problems(c.cuda, spec, targets)
    elif spec.gpu.min_driver is not None:
        if driver_key(spec.gpu.min_driver) < driver_key(floor):
            problems.append(
                f"CUDA {c.cuda} needs driver {floor} or newer, but the image must run on driver "
                f"{spec.gpu.min_driver}"
            )
        elif row is not None:
            toolkit = kb.toolkit_driver.get(c.cuda)
            for t in targets:
                cov = coverage(t.capability, row.entries)
                if cov.entry is not None and cov.entry.kind == "ptx" and toolkit is not None:
                    if driver_key(spec.gpu.min_driver) < driver_key(toolkit[0]):
                        problems.append(
                            f"{t.name} would run torch's PTX, which the driver must JIT-compile: PTX from "
                            f"CUDA {c.cuda} needs driver {toolkit[0]}, newer than {spec.gpu.min_driver}"
                        )
    return problems + _gpu_driver_problems(spec, targets, kb)


def _python_problem(c: _Candidate, py: str, kb: Knowledge) -> str:
    """Why a torch release has no wheels for a Python, with the releases that have them."""
    plat = c.on
    assert plat is not None
    where = "" if c.host == "x86_64" else f" {c.host}"
    supported = ", ".join(plat.pythons(c.version))
    until = plat.python_until.get(py)
    if until is not None:
        return (f"torch {c.version} has no{where} wheels for Python {py}: torch {c.release.series} published them "
                f"up to {until} only (torch {c.version} supports {supported})")
    having = [v for v in kb.all_patches() if (r := kb.release_of(v)) is not None and (p := r.on(c.host)) is not None
              and py in p.pythons(v)]
    span = (f"; {py} wheels exist for torch {min(having, key=Version)} to {max(having, key=Version)}" if having
            else f"; no torch release torchkiln knows has{where} wheels for Python {py}")
    kind = " (free-threaded)" if free_threaded(py) else ""
    return f"torch {c.version} has no{where} wheels for Python {py}{kind} (it supports {supported}{span})"


def _fits(c: _Candidate, spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    probs = _problems(c, spec, targets, kb) + companion_problems(c, spec, kb)
    for ext in spec.extensions:
        probs.extend(_extension_problems(ext, c, targets, kb))
    return probs


def _all_candidates(kb: Knowledge, host: str, cudas: Iterable[str] | None = None, *,
                    cpu: bool = False) -> list[_Candidate]:
    """Every (torch, CUDA) pair of ``host``, newest first; the CPU builds only where ``cpu`` is asked for."""
    out = []
    for v in kb.all_patches():
        rel = kb.release_of(v)
        assert rel is not None
        plat = rel.on(host)
        if plat is None:
            continue
        if cpu:  # every release has a CPU build (on PyPI or PyTorch's cpu index); _fits says where it lacks one
            out.append(_Candidate(v, rel, "cpu", host))
            continue
        ordered = [plat.default_cuda, *sorted((v for v in plat.variants if v != plat.default_cuda), key=cuda_key,
                                              reverse=True)]
        for cu in ordered:
            if cu in plat.variants_experimental or cu == "cpu":
                continue
            if cudas is None or cu in cudas:
                out.append(_Candidate(v, rel, cu, host))
    return out


#: a real ``nvidia/cuda:<release>-runtime-ubuntu22.04`` tag per CUDA minor (Docker Hub nvidia/cuda tags),
#: for suggesting a base whose devel sibling compiles extensions where NVIDIA ships no nvcc wheel
CUDA_IMAGE_RELEASES = {"11.8": "11.8.0", "12.1": "12.1.1", "12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1",
                       "12.9": "12.9.1"}
#: the releases above that NVIDIA also publishes on Ubuntu 24.04 (whose apt Python is 3.12)
CUDA_IMAGE_UBUNTU_24 = frozenset({"12.6.3", "12.8.1", "12.9.1"})



def _resolves(spec: Spec, kb: Knowledge, patch: Patch) -> bool:
    patched = _patched(spec, patch)
    if patched is None:
        return False
    token = _SUGGESTING.set(True)
    try:
        resolve(patched, kb)
    except KilnError:
        return False
    finally:
        _SUGGESTING.reset(token)
    return True


def _suggest(spec: Spec, kb: Knowledge, ideas: Iterable[tuple[str, str, Patch]], fallback: str,
             *, limit: int = 4, budget: int = 80) -> tuple[str, tuple[Patch, ...]]:
    """The hint and the fixes of an error: only ideas that resolve when applied to the spec are offered.

    Each idea is (kind, text, patch), nearest first; the first idea of each kind that resolves is kept
    (so the hint offers different ways out, not four torch versions), up to ``limit``. Their texts make
    the hint, their patches the error's ``fixes``. At most ``budget`` ideas are tried (each a full
    resolve, ~1 ms).
    """
    if _SUGGESTING.get():
        return fallback, ()
    found: dict[str, tuple[str, Patch]] = {}
    seen: set[str] = set()
    for n, (kind, text, patch) in enumerate(ideas):
        if n >= budget or len(found) >= limit:
            break
        key = json.dumps(patch, sort_keys=True)
        if kind not in found and key not in seen and _resolves(spec, kb, patch):
            found[kind] = (text, patch)
        seen.add(key)
    if not found:
        return fallback, ()
    return ("Would work: " + "; or ".join(t for t, _ in found.values()) + ".",
            tuple(p for _, p in found.values()))


def _torch_idea(c: _Candidate) -> tuple[str, Patch]:
    return f'torch {c.version} with cuda = "{c.cuda}"', {"torch": {"version": c.version, "cuda": c.cuda}}


def _base_idea(cuda: str, c: _Candidate | None = None) -> Iterable[tuple[str, str, Patch]]:
    """A CUDA runtime base (its devel sibling compiles; the runtime stays compiler-free), if one is known."""
    release = CUDA_IMAGE_RELEASES.get(cuda)
    if release is None:
        return
    # Ubuntu 22.04 first (Python 3.10, 3.11 from apt), then 24.04 (3.12) where NVIDIA publishes that tag
    for os_tag in ("ubuntu22.04", *(["ubuntu24.04"] if release in CUDA_IMAGE_UBUNTU_24 else [])):
        base = {"image": f"nvidia/cuda:{release}-runtime-{os_tag}", "python": "apt"}
        text = f'[base] image = "{base["image"]}" with python = "apt"'
        if c is None:
            yield "base", text, {"base": base}
        else:
            torch_text, patch = _torch_idea(c)
            yield "base", f"{torch_text} on {text}", {**patch, "base": base}


def _ideas(spec: Spec, targets: tuple[_Target, ...], kb: Knowledge, failed: _Candidate | None,
           problems: list[str]) -> Iterable[tuple[str, str, Patch]]:
    """Changes to the spec that might resolve, nearest first (``_suggest`` keeps those that do)."""
    host = failed.host if failed is not None else _host(spec, targets)[0]
    if (not spec.gpu.forward_compat and spec.gpu.min_driver is not None and targets
            and all(eligible(t.name) for t in targets)
            and any("but the image must run on driver" in p and p.startswith("CUDA ") for p in problems)):
        cuda = failed.cuda if failed is not None else ""
        rule = compat_facts().rules.get(cuda.split(".")[0])
        fc: Patch = {"gpu": {"forward_compat": True}}
        why = ("NVIDIA's cuda-compat package runs CUDA {cuda} on a driver of {branches} with data-center GPUs; the "
               "image switches it on at start only when the host driver is older")
        if rule is not None:
            yield ("forward compat", f"[gpu] forward_compat = true ({why.format(cuda=cuda, branches=rule.branches)})",
                   fc)
        for c in _all_candidates(kb, host)[:60]:  # another CUDA major whose compat package the branch supports
            other = compat_facts().rules.get(c.cuda.split(".")[0])
            if other is not None and other is not rule and c.cuda != "cpu":
                text, patch = _torch_idea(c)
                yield ("forward compat", f"{text} and [gpu] forward_compat = true "
                       f"({why.format(cuda=c.cuda, branches=other.branches)})", {**patch, **fc})
    fitting = [("torch", c) for c in _all_candidates(kb, host, cpu=spec.torch.cuda == "cpu")]
    if failed is not None:
        plat = failed.on
        same = [("same torch", _Candidate(failed.version, failed.release, cu, host))
                for cu in sorted((v for v in (plat.variants if plat else ()) if v != "cpu"), key=cuda_key,
                                 reverse=True)
                if spec.torch.cuda != "cpu"]  # a CPU image is never offered a CUDA build
        fitting = same + [("same cuda", c) for _, c in fitting if c.cuda == failed.cuda] + fitting
    compiles = any(e for e in spec.extensions) or spec.torch.source == "git"
    for kind, c in fitting:
        if _fits(c, spec, targets, kb):
            continue
        yield (kind, *_torch_idea(c))
        if compiles and c.cuda != "cpu":
            yield from _base_idea(c.cuda, c)
    py = spec.python.version
    for _, c in ([("failed", failed)] if failed is not None else []) + fitting[:40]:
        pys = c.on.pythons(c.version) if c.on is not None else ()
        if py in pys or c.cuda == "cpu" and spec.torch.cuda != "cpu":
            continue
        want = python_key(py)
        near = sorted(pys, key=lambda v: (python_key(v)[2] != want[2], abs(python_key(v)[1] - want[1])))
        for v in near[:2]:
            moved = _patched(spec, {"python": {"version": v}})
            if moved is not None and not _fits(c, moved, targets, kb):
                text, patch = _torch_idea(c)
                yield "python", f'[python] version = "{v}" with {text}', {**patch, "python": {"version": v}}
    too_new = [(t, driver) for t, driver, _cuda, _src in _gpu_driver_floors(targets, kb)
               if spec.gpu.min_driver is not None and driver_key(spec.gpu.min_driver) < driver_key(driver)]
    if too_new:
        needed = max((d for _, d in too_new), key=driver_key)
        yield "driver", f'[gpu] min_driver = "{needed}" (the oldest driver that knows every target)', {
            "gpu": {"min_driver": needed}}
        keep = [t.name for t in targets if t not in {x for x, _ in too_new}]
        if keep:
            yield ("drop targets", f"drop {', '.join(t.name for t, _ in too_new)} from [gpu] targets "
                   f"(targets = {keep})", {"gpu": {"targets": keep}})
    uncovered = [t for t in targets if any(f"kernel image for {t.name} " in p for p in problems)]
    keep = [t.name for t in targets if t not in uncovered]
    if uncovered and keep:
        yield ("drop targets", f"drop {', '.join(t.name for t in uncovered)} from [gpu] targets (targets = {keep})",
               {"gpu": {"targets": keep}})
    if uncovered and failed is not None:
        caps = sorted({t.capability for t in targets})
        text = (f'build torch from source ([torch] version = "{failed.version}", source = "git": '
                f"TORCH_CUDA_ARCH_LIST={format_arch_list(caps)})")
        source_patch: Patch = {"torch": {"version": failed.version, "cuda": failed.cuda, "source": "git"}}
        yield "source", text, source_patch
        for _, base_text, base_patch in _base_idea(failed.cuda):
            yield "source", f"{text} on {base_text}", {**source_patch, **base_patch}
    for i, ext in enumerate(spec.extensions):
        info = kb.extensions.get(ext.name)
        old = [t.name for t in targets if info is not None and t.capability < info.min_capability]
        keep = [t.name for t in targets if t.name not in old]
        if old and keep and info is not None:
            yield ("drop targets", f"drop {', '.join(old)} from [gpu] targets ({ext.name} needs compute capability "
                   f"{info.min_capability}+)", {"gpu": {"targets": keep}})
        others = [e.model_dump(by_alias=True, exclude_unset=True) for j, e in enumerate(spec.extensions) if j != i]
        yield "drop extension", f"drop the {ext.name} extension", {"extensions": others}
    if any(f"{p} has no release for torch" in x for p in spec.torch.packages for x in problems):
        yield from companion_ideas(spec)


def _publishes(c: _Candidate) -> bool:
    """Whether the candidate's release publishes its variant at all (a newer release may have dropped it, as
    2.15 dropped cu126): its failure then names the real obstacle, not the missing variant."""
    plat = c.on
    if c.cuda == "cpu" or plat is None:
        return c.cuda == "cpu"
    since = plat.variants_from.get(c.cuda)
    return c.cuda in plat.variants and (since is None or Version(c.version) >= Version(since))


def _knowledge_decisions(kb: Knowledge, version: str, cuda: str, host: str) -> list[Decision]:
    """Which rows the plan used: the built-in ones only, or some learned into the local overlay."""
    if not kb.overlay:
        return [Decision("knowledge", "built-in rows", f"torchkiln's own rows (torch releases up to "
                         f"{kb.all_patches()[0]}); there is no local overlay (`kiln knowledge update` learns newer "
                         "releases from the package indexes into one)", "")]
    from torchkiln.knowledge.overlay import learned_from

    learned = learned_from(kb, version, cuda, host)
    if not learned:
        return [Decision("knowledge", "built-in rows", f"every row this plan uses is built into torchkiln (the local "
                         f"overlay {kb.overlay} adds none of them)", "")]
    return [Decision("knowledge", f"built-in rows + local overlay {kb.overlay}",
                     f"{', '.join(learned)} learned by `kiln knowledge update` from the index (the built-in rows "
                     "end before it); the other rows are built in", "LEARNED")]


_NO_IDEA = "No known combination satisfies every constraint; relax [gpu] targets, min_driver or the torch version."


def _import_name(requirement: str) -> str:
    """``torchvision==0.29.1`` -> ``torchvision`` (the module a companion requirement installs)."""
    return canonicalize_name(Requirement(requirement).name).replace("-", "_")


def _precompile(spec: Spec, torch_plan: TorchPlan) -> tuple[str, ...]:
    """The modules the torch stage imports at build time, so that their bytecode is in the layer.

    Extra modules must be importable there (torch, its companions and their dependencies): a name from
    the spec's pip packages fails that step with Python's "No module named" (the packages stage compiles
    all of its files anyway).
    """
    names = ["torch", *(_import_name(r) for r in torch_plan.companions)]
    extra = spec.python.precompile if isinstance(spec.python.precompile, list) else []
    return tuple(dict.fromkeys([*names, *extra]))


_BUILDER_APT = ("build-essential", "ccache")
_RUNTIME_IMAGE = re.compile(
    r"^(?P<repo>(?:\S*/)?nvidia/cuda):(?P<ver>(?P<mm>\d+\.\d+)(?:\.\d+)*)-(?P<flavor>(?:[a-z0-9]+-)*)runtime-(?P<os>\S+)$"
)


def _source_targets(targets: tuple[_Target, ...], arch_list: str) -> list[TargetPlan]:
    """Coverage of the targets by what a source build compiles (instead of the official wheels)."""
    entries = parse_arch_list(arch_list)
    out = []
    for t in targets:
        cov = coverage(t.capability, entries)
        out.append(TargetPlan(name=t.name, capability=str(t.capability), family=t.family, covered=cov.covered,
                              how=f"{cov.how}, compiled from source" if cov.covered else cov.how))
    return out


def _torch_build(
    spec: Spec, kb: Knowledge, version: str, variant: str, decisions: list[Decision], warnings: list[str]
) -> TorchBuildPlan:
    ts = kb.torch_source
    if ts is None:  # _source_problems refuses such candidates; kept for the type checker
        raise ResolveError("no recipe for building torch from source.", hint="Use [torch] source = \"wheel\".")
    ref = spec.torch.ref or ts.ref.format(version=version)
    git = spec.torch.git or ts.git
    decisions.append(Decision(
        "torch build", f"from source: {git} at {ref}",
        "[torch] source = 'git': compiled in the torch-build stage the NGC way (pinned ref, TORCH_CUDA_ARCH_LIST "
        "from the targets, compressed fat binaries, CUDA/cuDNN/NCCL/distributed on, no tests, Ninja, ccache, "
        "MAX_JOBS from memory); the runtime installs only the wheel", ts.source))
    if spec.torch.packages:
        warnings.append(
            "torch is built from source, but torchvision/torchaudio come from the package index, compiled against "
            "the official torch; if their compiled ops fail to load, build them as [[extensions]] from their "
            "repositories instead."
        )
    return TorchBuildPlan(
        git=git, ref=ref, version=f"{version}+{variant}", env=tuple(sorted(ts.env.items())),
        build_requires=ts.build_requires, memory_per_job_gib=ts.memory_per_job_gib, source=ts.source,
    )


def _toolchain(
    spec: Spec,
    base_image: str, kb: Knowledge, torch: TorchPlan, exts: list[ExtensionPlan], decisions: list[Decision],
    warnings: list[str],
) -> ToolchainPlan | None:
    """The compiler of the builder stages, when anything is compiled."""
    compiled = [e for e in exts if e.build == "source"]
    if not compiled and torch.build is None:
        return None
    apt = list(_BUILDER_APT)
    if torch.build is not None or any(e.git for e in compiled):
        apt.append("git")
    if torch.cuda is None:
        decisions.append(Decision("toolchain", "host C++ compiler", "CPU torch: extensions compile with g++ alone", ""))
        return ToolchainPlan("image", "", (), (), "", tuple(apt), "")
    cuda = torch.cuda
    base_cuda = _base_image_cuda(base_image, kb)
    if base_cuda == cuda:
        decisions.append(Decision(
            "toolchain", f"the base image's CUDA {cuda}",
            f"{base_image} is a CUDA development image whose nvcc is torch's CUDA {cuda}", ""))
        warnings.append(
            f"the base image {base_image} carries nvcc and the CUDA headers, so the runtime stage has a compiler "
            "too; a slim base (torchkiln then takes nvcc from NVIDIA's wheels in the builder stages) keeps it out."
        )
        return ToolchainPlan("image", cuda, (), (), "/usr/local/cuda", tuple(apt), "")
    runtime = _RUNTIME_IMAGE.match(base_image)
    if runtime is not None and runtime.group("mm") == cuda:
        devel = f"{runtime.group('repo')}:{runtime.group('ver')}-{runtime.group('flavor')}devel-{runtime.group('os')}"
        decisions.append(Decision(
            "toolchain", f"{devel} (builder stages only)",
            f"the base is NVIDIA's CUDA {cuda} runtime image: the builder stages start from its devel sibling "
            "(same OS and Python, plus nvcc and the CUDA headers) and the runtime keeps the runtime image", ""))
        return ToolchainPlan("image", cuda, (), (), "/usr/local/cuda", tuple(apt), "", image=devel)
    if base_cuda is not None:
        warnings.append(
            f"the base image {base_image} has CUDA {base_cuda}, not torch's {cuda}: the builder stages install "
            f"NVIDIA's CUDA {cuda} compiler wheels instead of using its nvcc."
        )
    row = next((r for r in kb.toolchains if r.cuda_major == cuda.split(".")[0]), None)
    if row is None:
        what = [*(["torch (from source)"] if torch.build is not None else []), *(e.name for e in compiled)]
        targets = _targets(spec, kb)
        other_cuda = (i for i in _ideas(spec, targets, kb, None, []) if i[2].get("torch", {}).get("cuda") != cuda)
        ideas = itertools.chain(_base_idea(cuda), other_cuda)
        hint, fixes = _suggest(spec, kb, ideas, (
            f"Build on NVIDIA's CUDA {cuda} runtime image ([base] image = nvidia/cuda:{cuda}.x-runtime-<os>, "
            "python = apt; the builder stages then use its devel sibling), on a CUDA devel image, or choose a "
            "CUDA 13 variant of torch if the driver floor allows it."))
        raise ResolveError(
            f"{', '.join(what)} is compiled against torch's CUDA {cuda}, but NVIDIA publishes no CUDA {cuda} "
            f"compiler as a wheel (the nvidia-cuda-nvcc-cu{cuda.split('.')[0]} wheels carry ptxas only; nvcc "
            f"wheels start with CUDA 13) and the base image {base_image} has no CUDA {cuda} compiler.",
            hint=hint, fixes=fixes,
        )
    compiler = tuple(r.replace("{cuda}", cuda) for r in row.compiler)
    libraries = tuple(r.replace("{cuda}", cuda) for r in row.libraries)
    decisions.append(Decision(
        "toolchain", f"CUDA {cuda} compiler wheels",
        f"the base image has no CUDA {cuda} compiler: nvcc, the CUDA headers and CCCL come from NVIDIA's wheels of "
        f"torch's own CUDA ({', '.join(compiler)}), merged into /usr/local/cuda in the builder stages only",
        row.source))
    return ToolchainPlan("wheels", cuda, compiler, libraries, "/usr/local/cuda", tuple(apt), row.source)


def _dev_toolchain(
    spec: Spec, base_image: str, kb: Knowledge, torch: TorchPlan, decisions: list[Decision], warnings: list[str]
) -> ToolchainPlan | None:
    """The CUDA compiler of the dev stage when nothing else is compiled (else it shares the builders').

    A dev image is where people build extensions, so a CUDA plan gives it torch's own nvcc by the same
    rules as the builder stages; where there is none (CUDA 12 on a base without it: NVIDIA ships no
    CUDA 12 nvcc wheel) the dev stage keeps g++ only and a warning says how to get nvcc.
    """
    if torch.cuda is None:
        return None  # the dev stage's build-essential is the whole CPU toolchain
    probe = replace(torch, build=TorchBuildPlan("", "", "", (), (), 0, ""))  # "something is compiled"
    token = _SUGGESTING.set(True)  # its error is not shown: no need to search for fixes
    try:
        tc = _toolchain(spec, base_image, kb, probe, [], [], [])
    except ResolveError:
        where = ("use a CUDA 13 variant (no Debian or Ubuntu archive has a free-threaded Python for an NVIDIA "
                 "CUDA base)" if free_threaded(spec.python.version) else
                 f"build on NVIDIA's CUDA {torch.cuda} runtime image ([base] image, python = \"apt\") or a CUDA "
                 "devel image, or use a CUDA 13 variant")
        warnings.append(
            f"the dev stage has no nvcc: NVIDIA publishes no CUDA {torch.cuda} compiler as a wheel and "
            f"{base_image} has none; for CUDA work in the dev image, {where}."
        )
        return None
    finally:
        _SUGGESTING.reset(token)
    if tc is not None:
        tc = replace(tc, apt=tuple(a for a in tc.apt if a != "git"))
        decisions.append(Decision(
            "dev toolchain", f"torch's CUDA {tc.cuda} nvcc in the dev stage",
            "the dev image is where extensions are built: it starts from the toolchain stage (nvcc, g++, "
            "Ninja, ccache); the runtime never has a compiler", tc.source))
    return tc


#: PyTorch's own index of each variant (what [sources] torch_index names; the build never hard-codes it)
TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


def _base_python(spec: Spec, kb: Knowledge, targets: tuple[_Target, ...], chosen: _Candidate) -> tuple[str, str]:
    """(base image, the Python uv installs into it or ""): the base must be able to give the spec's Python.

    ``[base] python = "apt"`` installs python3.X from the distribution's archive, which has only its own
    Pythons (Ubuntu 22.04: 3.10 and 3.11); no archive has a free-threaded one. With no [base] image a
    free-threaded Python is installed by uv on Debian slim (no official Python image is free-threaded).
    """
    py = spec.python.version
    image = spec.base.image
    problem = ""
    if spec.base.python == "apt":
        distro = distro_of(image) if image else None
        if free_threaded(py):
            problem = (f"[base] python = \"apt\" installs python{py} from the base's package archive, but no Debian "
                       f"or Ubuntu release packages a free-threaded Python (python{py}) in its archive")
        elif distro is not None and py not in distro.python:
            problem = (f"[base] python = \"apt\" installs python{py} from the archive of {image} ({distro.name}), "
                       f"which has Python {', '.join(distro.python)} only: `apt-get install python{py}` would fail")
        if problem:
            ideas: list[tuple[str, str, Patch]] = []
            if distro is not None and not free_threaded(py):
                ideas += [("python", f'[python] version = "{v}" (the Python of {distro.name})',
                           {"python": {"version": v}}) for v in distro.python]
            ideas.append(("base", "remove [base] image and python: torchkiln's default base for this Python",
                          {"base": {"image": "", "python": "image"}}))
            hint, fixes = _suggest(spec, kb, ideas, "Use a [python] version the base's archive has, or a base "
                                   "image that brings the Python (python = \"image\").")
            raise ResolveError(problem + ".", hint=hint, fixes=fixes)
        return image or f"python:{py}-slim-bookworm", ""
    if not free_threaded(py):
        return image or f"python:{py}-slim-bookworm", ""
    if not image:
        return FREE_THREADED_BASE, py
    if official_python_image(image) or image.startswith("kiln-base:"):
        what = ("Docker's official Python images are built with the GIL only (docker-library/python#1082)"
                if official_python_image(image) else "the offline kiln-base has Debian's Python 3.11 only")
        hint, fixes = _suggest(spec, kb, [("base", "remove [base] image: uv then installs the free-threaded "
                                           f"CPython {py} on {FREE_THREADED_BASE}", {"base": {"image": ""}})],
                               f"Use a base image that has python{py} on its PATH, or none.")
        raise ResolveError(f"[python] version = \"{py}\" needs the free-threaded interpreter python{py} in the "
                           f"base image, and {image} has none: {what}.", hint=hint, fixes=fixes)
    return image, ""


def _platform_error(spec: Spec, kb: Knowledge, targets: tuple[_Target, ...], error: ResolveError) -> ResolveError:
    """The error of targets that cannot share the image's platform, with the platform moves (or target splits)
    that resolve as its fixes."""
    ideas: list[tuple[str, str, Patch]] = []
    for host, oci in OCI_PLATFORM.items():
        if spec.image.platform != oci:
            ideas.append(("platform", f'[image] platform = "{oci}"', {"image": {"platform": oci}}))
            for c in _nearest(spec, _all_candidates(kb, host))[:30]:  # the move with a torch that has wheels there
                text, patch = _torch_idea(c)
                ideas.append(("platform", f'[image] platform = "{oci}" with {text}', {**patch,
                                                                                      "image": {"platform": oci}}))
    groups: dict[str, list[str]] = {}
    for t in targets:
        groups.setdefault(t.hosts[0], []).append(t.name)
    if len(groups) > 1:
        for h, names in groups.items():
            ideas.append(("split", f"one image for {', '.join(names)} ([gpu] targets = {names}, {OCI_PLATFORM[h]})",
                          {"gpu": {"targets": names}, "image": {"platform": OCI_PLATFORM[h]}}))
    hint, fixes = _suggest(spec, kb, ideas, "No platform move resolves with these settings; build one image per "
                           "platform, each spec with its own targets.")
    if fixes and len(groups) > 1:
        hint += " Or build one image per platform, each spec with its own targets."
    return ResolveError(error.message, hint=hint, fixes=fixes)


def _nearest(spec: Spec, candidates: list[_Candidate]) -> list[_Candidate]:
    """Candidates nearest the spec's pinned torch first (stable: newest first among equals)."""
    try:
        want = Version(spec.torch.version)
    except Exception:  # a specifier or nothing: newest first
        return candidates
    return sorted(candidates, key=lambda c: abs((Version(c.version).major - want.major) * 100
                                                + Version(c.version).minor - want.minor))


def _wheel_source(kb: Knowledge, version: str, label: str, host: str, plat: ReleasePlatform, on_default: bool,
                  variant: str) -> Decision:
    """Where the torch wheel comes from: the default package index, or PyTorch's index of the variant."""
    where = "" if host == "x86_64" else f" {host}"
    if on_default:
        what = ("a CPU build (no local version label)" if plat.default_cuda == "cpu"
                else f"the {_variant_name(plat.default_cuda)} build")
        return Decision("wheel source", "the default package index (PyPI)",
                        f"PyPI's{where} torch {version} wheel is {what}: `torch=={version}` installs it with no "
                        "torch index", "MEASURED" if "MEASURED" in plat.source else plat.source)
    why = f"torch {version}{label} is not on PyPI"
    if plat.default_cuda != "cpu" and variant == "cpu":
        why += (f": PyPI's{where} torch {version} is the {_variant_name(plat.default_cuda)} build, which pulls "
                "about 2 GB of nvidia-* CUDA library wheels")
    if host == "aarch64" and variant == "cpu":
        cpu_on_pypi = [p for r in kb.releases if (a := r.on("aarch64")) is not None and a.default_cuda == "cpu"
                       for p in r.patches]
        if cpu_on_pypi:
            newest = max(cpu_on_pypi, key=Version)
            why += f" (PyPI's aarch64 torch up to {newest} is a CPU build: pin {newest} to need no torch index)"
    why += (f". The build takes it from the torch index named in [sources] torch_index / --torch-index / "
            f"KILN_TORCH_INDEX (PyTorch's: {TORCH_INDEX.format(variant=variant)}), or from a wheel folder")
    return Decision("wheel source", f"PyTorch's {variant} index", why, "TI")


def resolve(spec: Spec, kb: Knowledge, facts: ImageFacts | None = None,
            project: ProjectFacts | None = None) -> BuildPlan:
    """Decide everything, or raise ``ResolveError`` saying what would work instead.

    ``facts``: what was read from the base image when ``[torch] source = "image"`` (None: not read; the
    knowledge base's row of the image is used where there is one). ``project``: what was read from the
    ``[project]`` folder (``torchkiln.project.read_project``; see ``torchkiln.resolve.project``).
    """
    if project is not None:
        from torchkiln.resolve.project import resolve_project

        return resolve_project(spec, kb, facts, project, own=resolve)
    if spec.torch.source == "image":
        from torchkiln.resolve.image import resolve_image

        return resolve_image(spec, kb, facts, own=resolve)
    targets = _targets(spec, kb)
    try:
        host, why_host = _host(spec, targets)
    except ResolveError as e:  # a platform move is offered only where it resolves
        raise _platform_error(spec, kb, targets, e) from None
    platform = OCI_PLATFORM[host]
    decisions: list[Decision] = []
    warnings: list[str] = []

    chosen: _Candidate | None = None
    first_failure: tuple[_Candidate, list[str]] | None = None
    for version in _versions(spec, kb):
        rel = kb.release_of(version)
        assert rel is not None
        for cu in _cuda_options(spec, rel, host):
            cand = _Candidate(version, rel, cu, host)
            probs = _fits(cand, spec, targets, kb)
            if not probs:
                chosen = cand
                break
            if first_failure is None or (not _publishes(first_failure[0]) and _publishes(cand)):
                first_failure = (cand, probs)  # the newest that publishes the asked variant says the most
        if chosen is not None:
            break
    if chosen is None:
        assert first_failure is not None
        cand, probs = first_failure
        hint, fixes = _suggest(spec, kb, _ideas(spec, targets, kb, cand, probs), _NO_IDEA)
        raise ResolveError("; ".join(dict.fromkeys(probs)) + ".", hint=hint, fixes=fixes)

    rel = chosen.release
    plat = chosen.on
    assert plat is not None
    version = chosen.version
    py = spec.python.version
    index_only = py in plat.python_index_only
    if py in plat.python_experimental:
        warnings.append(
            f"Python {py} support in torch {rel.series} is experimental upstream"
            + (": its wheels are on PyTorch's own index only, not on the default package index." if index_only
               else "."))

    # torch requirement and where it comes from
    if chosen.cuda == plat.default_cuda and not index_only:
        label = ""  # the default index's build: CUDA, or (older aarch64 releases) a CPU build without a label
        on_default = True
    elif chosen.cuda == "cpu":
        label = "+cpu"
        on_default = False
    else:
        label = "+" + _variant_name(chosen.cuda)
        on_default = False
    source_build = spec.torch.source == "git" and chosen.cuda != "cpu"
    if source_build:  # torch comes from our own wheel, not from an index
        label, on_default = "", True
    row = None if chosen.cuda == "cpu" else kb.arch_row(rel.series, chosen.cuda, host)
    torch_plan = TorchPlan(
        version=version,
        variant=_variant_name(chosen.cuda),
        cuda=None if chosen.cuda == "cpu" else chosen.cuda,
        requirement=f"torch=={version}{label}",
        on_default_index=on_default,
        wheel_arch_list=row.arch_list if row else "",
        wheel_arch_source=row.source if row else "",
        companions=companion_requirements(spec, version, rel, label, kb),
    )
    why_version = (
        f"'{spec.torch.version}' names the {rel.series} series: its newest patch that passes every check "
        f"(patches: {', '.join(rel.patches)})" if spec.torch.version == rel.series
        else "pinned in the spec" if spec.torch.version and not any(c in spec.torch.version for c in "<>=!~,")
        else f"newest release satisfying {spec.torch.version or 'any version'} that passes every check"
    )
    decisions.append(Decision("platform", platform, why_host, "GPUS" if spec.image.platform is None and targets
                              and host != "x86_64" else ""))
    decisions.append(Decision("torch", version, why_version, rel.learned.get(version, rel.source)))
    if chosen.cuda == "cpu":
        decisions.append(Decision("variant", "cpu", "cuda = 'cpu' in the spec", ""))
    else:
        why = "requested in the spec" if spec.torch.cuda != "auto" else (
            "the variant a plain install gets, and it covers every target"
            if on_default else "the newest variant that covers every target within the driver floor"
        )
        decisions.append(Decision("variant", torch_plan.variant, why, rel.source))
    if not source_build:
        decisions.append(_wheel_source(kb, version, label, host, plat, on_default, torch_plan.variant))
    decisions.extend(companion_decisions(spec, version, rel, kb))
    decisions.extend(_knowledge_decisions(kb, version, chosen.cuda, host))

    # targets
    target_plans: list[TargetPlan] = []
    for t in targets:
        cov = coverage(t.capability, row.entries) if row else None
        target_plans.append(TargetPlan(
            name=t.name, capability=str(t.capability), family=t.family,
            covered=bool(cov and cov.covered), how=cov.how if cov else "no kernel image",
        ))
    if row is not None and not source_build:
        decisions.append(Decision("wheel archs", row.arch_list,
                                  "compiled into the official wheels of this variant", row.source))

    # arch list for code compiled in the image
    if chosen.cuda == "cpu":
        arch_list = ""
    else:
        caps = [t.capability for t in targets]
        if not caps and row is not None:
            caps = sorted({e.capability for e in row.entries})
        if not caps and source_build:
            caps = sorted(set(kb.default_targets))
        toolkit = kb.toolkit_max_target(chosen.cuda)
        if toolkit is not None:
            lo, hi = toolkit
            bad = [c for c in caps if c < lo or c > hi]
            if bad and targets:
                keep = [t.name for t in targets if lo <= t.capability <= hi]
                drop = [("drop targets", f"drop them from [gpu] targets (targets = {keep})",
                         {"gpu": {"targets": keep}})] * bool(keep)
                hint, fixes = _suggest(spec, kb, itertools.chain(_ideas(spec, targets, kb, chosen, []), drop),
                                       "Choose another CUDA variant with [torch] cuda, or drop those targets.")
                raise ResolveError(
                    f"CUDA {chosen.cuda} cannot compile for compute capability "
                    f"{', '.join(str(b) for b in bad)} (it targets {lo} to {hi}).",
                    hint=hint, fixes=fixes,
                )
            caps = [c for c in caps if lo <= c <= hi]
            unknown = [c for c in caps if _toolkit_lacks(kb, chosen.cuda, c) is not None]
            if unknown and targets and (spec.extensions or source_build):
                keep = [t.name for t in targets if t.capability not in unknown]
                drop = [("drop targets", f"drop them from [gpu] targets (targets = {keep})",
                         {"gpu": {"targets": keep}})] * bool(keep)
                hint, fixes = _suggest(spec, kb, itertools.chain(_ideas(spec, targets, kb, chosen, []), drop),
                                       "Choose a newer CUDA variant with [torch] cuda, or drop those targets.")
                raise ResolveError(
                    f"CUDA {chosen.cuda} cannot compile for "
                    f"{'; '.join(str(_toolkit_lacks(kb, chosen.cuda, c)) for c in unknown)}, and this image compiles "
                    "code for its targets.", hint=hint, fixes=fixes)
            caps = [c for c in caps if c not in unknown]
        newest = max(caps) if caps else None
        arch_list = format_arch_list(caps, newest if spec.gpu.ptx else None)
        decisions.append(Decision(
            "TORCH_CUDA_ARCH_LIST", arch_list,
            ("the targets" if targets else "torch's own list (no targets given)")
            + (", with PTX of the newest for forward compatibility" if spec.gpu.ptx else ""),
            "CPPEXT"))

    if source_build:
        torch_plan = replace(
            torch_plan, wheel_arch_list=arch_list, wheel_arch_source="compiled from source",
            build=_torch_build(spec, kb, version, torch_plan.variant, decisions, warnings),
        )
        target_plans = _source_targets(targets, arch_list)

    # driver floor
    cuda_compat = ""
    if chosen.cuda == "cpu":
        min_driver, min_driver_source, require = None, "", None
    elif spec.gpu.forward_compat:
        rule = compat_facts().rules[chosen.cuda.split(".")[0]]
        cuda_compat = compat_facts().images[chosen.cuda]
        min_driver, min_driver_source, require = rule.min_driver, rule.source, rule.require
        gpu_floors = [f for f in _gpu_driver_floors(targets, kb) if driver_key(f[1]) > driver_key(min_driver)]
        why = (f"[gpu] forward_compat: NVIDIA's cuda-compat package of CUDA {chosen.cuda} (copied from {cuda_compat}) "
               f"runs it on a driver of {rule.branches} with data-center GPUs; the entrypoint puts it first on the "
               "library path only when the host driver is older than it, so a newer host driver is never shadowed; "
               f"NVIDIA_REQUIRE_CUDA={require}")
        if gpu_floors:
            t, min_driver, first, min_driver_source = max(gpu_floors, key=lambda f: driver_key(f[1]))
            why += (f"; but {t.name} (compute capability {t.capability}) needs {min_driver}, the first driver "
                    f"that knows it (CUDA {first}): compat libraries cannot teach an older kernel driver a GPU")
        decisions.append(Decision("driver floor", min_driver, why, min_driver_source))
    else:
        min_driver, min_driver_source = kb.driver_floor(chosen.cuda)
        major = chosen.cuda.split(".")[0]
        require = f"cuda>={major}.0"
        why = (f"CUDA {chosen.cuda} runs on any driver of the CUDA {major} family (minor-version compatibility); "
               f"NVIDIA_REQUIRE_CUDA={require}")
        gpu_floors = [f for f in _gpu_driver_floors(targets, kb) if driver_key(f[1]) > driver_key(min_driver)]
        if gpu_floors:
            t, min_driver, first, min_driver_source = max(gpu_floors, key=lambda f: driver_key(f[1]))
            why += (f"; but {t.name} (compute capability {t.capability}) needs {min_driver}, the first driver "
                    f"that knows it (CUDA {first})")
        decisions.append(Decision("driver floor", min_driver, why, min_driver_source))

    # extensions
    ext_plans = [
        _extension_plan(ext, spec, kb, torch_plan, arch_list, targets, decisions, warnings) for ext in spec.extensions
    ]

    base_image, python_install = _base_python(spec, kb, targets, chosen)
    decisions.append(Decision(
        "base image", base_image,
        ("given in [base] image" if spec.base.image else
         f"Debian slim: no official Python image has a free-threaded build (docker-library/python#1082), so "
         f"uv installs CPython {py} into it (below)" if python_install else
         "official Python slim image: torch's wheels carry their CUDA libraries, so no CUDA base is needed "
         "and the driver comes from the host")
        + ("" if host == "x86_64" else f"; its {platform} variant (the base must offer {platform})"), ""))
    if python_install:
        decisions.append(Decision(
            "python", f"CPython {py} (free-threaded) installed by uv",
            f"`uv python install {py}` in the base stage puts python-build-standalone's free-threaded build in "
            f"{PYTHON_INSTALL_DIR} and python{py} in /usr/local/bin, for every stage; it downloads the interpreter "
            "at build time (GitHub, or the mirror in UV_PYTHON_INSTALL_MIRROR): neither the offline kiln-base "
            "(Debian bookworm, Python 3.11) nor any Debian or Ubuntu archive has a free-threaded Python", "DISTRO"))
    if free_threaded(py):
        warnings.append(
            f"Python {py} is free-threaded: every compiled package must have a cp{py.replace('.', '')} wheel "
            f"(tag cp{py.replace('.', '').removesuffix('t')}-cp{py.replace('.', '')}) or build from source for it; "
            "a package with only GIL wheels is compiled from its sdist (a compiler is then needed) or fails, and "
            "one whose extension does not declare free-threading support turns the GIL back on at import.")
    toolchain = _toolchain(spec, base_image, kb, torch_plan, ext_plans, decisions, warnings)
    dev_toolchain = toolchain if toolchain is not None else _dev_toolchain(spec, base_image, kb, torch_plan,
                                                                           decisions, warnings)

    prune = _prune_plan(spec, torch_plan, targets, ext_plans, decisions)

    apt = list(spec.packages.apt)
    if spec.base.python == "apt":
        apt.insert(0, f"python{py}")
    if python_install:
        apt.insert(0, "ca-certificates")  # uv downloads the interpreter over HTTPS

    return BuildPlan(
        image_name=spec.image.name,
        tag=spec.image.tag,
        python=py,
        python_exe=f"python{py}",
        python_source=spec.base.python,
        base_image=base_image,
        torch=torch_plan,
        targets=tuple(target_plans),
        arch_list=arch_list,
        min_driver=min_driver,
        min_driver_source=min_driver_source,
        nvidia_require_cuda=require,
        pip_packages=tuple(spec.packages.pip),
        apt_packages=tuple(dict.fromkeys(apt)),
        extensions=tuple(ext_plans),
        app=app_plan(spec),
        steps=step_plans(spec),
        sources=SourcesPlan(
            index_url=spec.sources.index_url,
            extra_index_urls=tuple(spec.sources.extra_index_urls),
            find_links=tuple(spec.sources.find_links),
            torch_index=spec.sources.torch_index,
            network=spec.sources.network,
        ),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
        toolchain=toolchain,
        dev_toolchain=dev_toolchain,
        bytecode="all" if spec.python.precompile == "all" else "imports",
        precompile=_precompile(spec, torch_plan),
        platform=platform,
        python_install=python_install,
        cuda_compat=cuda_compat,
        prune=prune,
    )


def _prune_plan(spec: Spec, torch_plan: TorchPlan, targets: Iterable[Any], ext_plans: Iterable[ExtensionPlan],
                decisions: list[Decision]) -> PrunePlan | None:
    """With [gpu] targets, torch's and the extensions' fat binaries keep only the targets' device code."""
    if torch_plan.cuda is None or not spec.gpu.targets:
        return None
    if not spec.gpu.prune:
        decisions.append(Decision("fat binaries", "kept whole", "[gpu] prune = false", ""))
        return None
    caps = tuple(str(c) for c in sorted({t.capability for t in targets}))
    what = ("torch", "extension-libraries") if list(ext_plans) else ("torch",)
    plan = PrunePlan(caps, spec.gpu.ptx, what)
    decisions.append(Decision(
        "fat binaries",
        f"{' and '.join(w.replace('-', ' ') for w in what)} pruned to {', '.join(caps)}"
        + (" (+ newest PTX)" if spec.gpu.ptx else ""),
        "[gpu] targets are given: each .nv_fatbin keeps the SASS of the targets (and their a/f variants)"
        + (", plus the newest PTX that runs on them ([gpu] ptx)" if spec.gpu.ptx else "")
        + " in the step that installs it, and the files shrink (libtorch_cuda.so of torch 2.11 cu130: 435 -> 199 MiB "
        "for 9.0); NVIDIA's libraries are never modified; [gpu] prune = false keeps them whole", ""))
    return plan
