"""resolve: ``Spec × Knowledge → BuildPlan`` or a ``ResolveError``. Pure: no I/O, no clock.

The checks run before anything is built, in this order: GPU names, torch version × Python,
CUDA variant × GPU coverage (the "no kernel image is available" failure), variant × driver floor,
extensions × targets × torch. When nothing works the error says what is wrong, why, and what
would work instead (found by searching the knowledge base for the nearest combination that passes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchkiln.arch import Capability, coverage, format_arch_list
from torchkiln.errors import ResolveError
from torchkiln.knowledge import Knowledge, TorchRelease, cuda_key
from torchkiln.plan import (
    AppPlan,
    BuildPlan,
    Decision,
    ExtensionPlan,
    SourcesPlan,
    TargetPlan,
    TorchPlan,
)
from torchkiln.spec import ExtensionSpec, Spec


@dataclass(frozen=True)
class _Target:
    name: str
    capability: Capability
    family: str


@dataclass(frozen=True)
class _Candidate:
    version: str
    release: TorchRelease
    cuda: str  # "12.4" or "cpu"


def _driver_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _variant_name(cuda: str) -> str:
    return "cpu" if cuda == "cpu" else "cu" + cuda.replace(".", "")


def _targets(spec: Spec, kb: Knowledge) -> tuple[_Target, ...]:
    out: list[_Target] = []
    for name in spec.gpu.targets:
        label, cap, gpu = kb.lookup_gpu_entry(name)
        if gpu is not None and gpu.platform == "aarch64":
            raise ResolveError(
                f"target {name!r} (compute capability {cap}) is an ARM (Jetson/Tegra) device; torchkiln builds "
                "x86_64 images, whose wheels never run there.",
                hint="Remove it from [gpu] targets and build on NVIDIA's L4T/JetPack images for Jetson.",
            )
        family = gpu.family if gpu is not None else ""
        out.append(_Target(label, cap, family))
    # stable order, no duplicates by name
    seen: set[str] = set()
    uniq = []
    for t in out:
        if t.name not in seen:
            seen.add(t.name)
            uniq.append(t)
    return tuple(uniq)


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
    if exact is not None:
        if str(exact) not in known:
            series = kb.release_of(str(exact))
            near = series.patches if series else known[:5]
            raise ResolveError(
                f"torch {text} is not a release torchkiln knows (known: {', '.join(near)}).",
                hint="Pin a known version, or use a specifier such as '>=2.5,<2.7' to let torchkiln choose.",
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


def _cuda_options(spec: Spec, release: TorchRelease, version: str) -> list[str]:
    cuda = spec.torch.cuda
    if cuda == "cpu":
        return ["cpu"]
    if cuda != "auto":
        return [cuda]
    stable = [v for v in release.variants if v not in release.variants_experimental]
    # the plain-install default first (no extra index needed), then newest CUDA first
    rest = sorted((v for v in stable if v != release.default_cuda), key=cuda_key, reverse=True)
    return [release.default_cuda, *rest]


def _problems(c: _Candidate, spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    """Why this candidate fails (empty = it works)."""
    problems: list[str] = []
    rel = c.release
    py = spec.python.version
    if py not in rel.python:
        problems.append(
            f"torch {c.version} has no wheels for Python {py} (it supports {', '.join(rel.python)})"
        )
    if c.cuda == "cpu":
        if targets:
            problems.append("the CPU build of torch runs no GPU kernels, but [gpu] targets are set")
        return problems
    if c.cuda not in rel.variants:
        problems.append(
            f"torch {c.version} is not built for CUDA {c.cuda} "
            f"(its variants: {', '.join('cu' + v.replace('.', '') for v in rel.variants)})"
        )
        return problems
    row = kb.arch_row(rel.series, c.cuda)
    if targets and row is None:
        problems.append(
            f"the architecture list of torch {rel.series} {_variant_name(c.cuda)} wheels is not confirmed, "
            "so coverage of the targets cannot be checked"
        )
    elif row is not None:
        for t in targets:
            cov = coverage(t.capability, row.entries)
            if not cov.covered:
                problems.append(
                    f"torch {c.version} {_variant_name(c.cuda)} has no kernel image for {t.name} "
                    f"(compute capability {t.capability}): its wheels carry {row.arch_list or 'nothing'}"
                    f"{'' if any(e.kind == 'ptx' for e in row.entries) else ' and no PTX'}"
                )
    floor, _ = kb.driver_floor(c.cuda)
    if spec.gpu.min_driver is not None:
        if _driver_key(spec.gpu.min_driver) < _driver_key(floor):
            problems.append(
                f"CUDA {c.cuda} needs driver {floor} or newer, but the image must run on driver "
                f"{spec.gpu.min_driver}"
            )
        elif row is not None:
            toolkit = kb.toolkit_driver.get(c.cuda)
            for t in targets:
                cov = coverage(t.capability, row.entries)
                if cov.entry is not None and cov.entry.kind == "ptx" and toolkit is not None:
                    if _driver_key(spec.gpu.min_driver) < _driver_key(toolkit[0]):
                        problems.append(
                            f"{t.name} would run torch's PTX, which the driver must JIT-compile: PTX from "
                            f"CUDA {c.cuda} needs driver {toolkit[0]}, newer than {spec.gpu.min_driver}"
                        )
    return problems


def _extension_problems(
    ext: ExtensionSpec, c: _Candidate, targets: tuple[_Target, ...], kb: Knowledge
) -> list[str]:
    info = kb.extensions.get(ext.name)
    if info is None:
        return []
    problems: list[str] = []
    if Version(c.version) not in SpecifierSet(info.torch):
        problems.append(f"{ext.name} needs torch {info.torch}, not {c.version}")
    if c.cuda == "cpu":
        problems.append(f"{ext.name} is a CUDA extension and cannot be built against the CPU build of torch")
        return problems
    if cuda_key(c.cuda) < cuda_key(info.min_cuda):
        problems.append(f"{ext.name} needs CUDA {info.min_cuda} or newer, not {c.cuda}")
    for t in targets:
        if t.capability < info.min_capability:
            problems.append(
                f"{ext.name} supports compute capability {info.min_capability} and newer; "
                f"{t.name} is {t.capability}"
            )
    if ext.version and info.pairs:
        want = info.pairs.get(ext.version)
        if want is not None and Version(c.version) not in SpecifierSet(want):
            problems.append(f"{ext.name} {ext.version} is built for torch {want}, not {c.version}")
    return problems


def _fits(c: _Candidate, spec: Spec, targets: tuple[_Target, ...], kb: Knowledge) -> list[str]:
    probs = _problems(c, spec, targets, kb)
    for ext in spec.extensions:
        probs.extend(_extension_problems(ext, c, targets, kb))
    return probs


def _all_candidates(kb: Knowledge, cudas: Iterable[str] | None = None) -> list[_Candidate]:
    out = []
    for v in kb.all_patches():
        rel = kb.release_of(v)
        assert rel is not None
        ordered = [rel.default_cuda, *sorted((v for v in rel.variants if v != rel.default_cuda), key=cuda_key,
                                             reverse=True)]
        for cu in ordered:
            if cu in rel.variants_experimental:
                continue
            if cudas is None or cu in cudas:
                out.append(_Candidate(v, rel, cu))
    return out


def _alternatives(
    spec: Spec, targets: tuple[_Target, ...], kb: Knowledge, failed: _Candidate, problems: list[str]
) -> str:
    """A short list of combinations that would work, nearest first."""
    ideas: list[str] = []
    same_version = [
        _Candidate(failed.version, failed.release, cu)
        for cu in sorted(failed.release.variants, key=cuda_key, reverse=True)
    ]
    for c in same_version:
        if not _fits(c, spec, targets, kb):
            ideas.append(f'torch {c.version} with cuda = "{c.cuda}"')
            break
    if failed.cuda != "cpu":
        for c in _all_candidates(kb, [failed.cuda]):
            if c.version != failed.version and not _fits(c, spec, targets, kb):
                ideas.append(f'torch {c.version} with cuda = "{c.cuda}"')
                break
    for c in _all_candidates(kb):
        if spec.torch.cuda == "cpu" and c.cuda != "cpu":
            break
        if not _fits(c, spec, targets, kb):
            text = f'torch {c.version} with cuda = "{c.cuda}"'
            if text not in ideas:
                ideas.append(text)
            break
    uncovered = [t for t in targets if any(f"kernel image for {t.name} " in p for p in problems)]
    if uncovered:
        caps = sorted({t.capability for t in targets})
        ideas.append(f"build torch from source with TORCH_CUDA_ARCH_LIST={format_arch_list(caps)}")
    for ext in spec.extensions:
        info = kb.extensions.get(ext.name)
        if info is None:
            continue
        old = [t.name for t in targets if t.capability < info.min_capability]
        if old:
            ideas.append(
                f"drop {', '.join(old)} from [gpu] targets ({ext.name} needs compute capability "
                f"{info.min_capability}+), or drop {ext.name}"
            )
    if not ideas:
        return "No known combination satisfies every constraint; relax [gpu] targets, min_driver or the torch version."
    return "Would work: " + "; or ".join(ideas) + "."


def _companions(spec: Spec, version: str, release: TorchRelease, label: str) -> tuple[str, ...]:
    out: list[str] = []
    for pkg in spec.torch.packages:
        if pkg == "torchvision":
            tv = release.torchvision.get(version)
            if tv is None:
                raise ResolveError(
                    f"the torchvision release that matches torch {version} is not in torchkiln's knowledge base.",
                    hint=f"Pin a torch version whose pair is known ({', '.join(release.torchvision) or 'none'}).",
                )
            out.append(f"torchvision=={tv}{label}")
        elif pkg == "torchaudio":
            if Version(version) >= Version("2.10"):
                raise ResolveError(
                    f"no torchaudio release matched to torch {version} is confirmed.",
                    hint="Use torch <= 2.9.1 with torchaudio, or drop torchaudio from [torch] packages.",
                )
            out.append(f"torchaudio=={version}{label}")
    return tuple(out)


def resolve(spec: Spec, kb: Knowledge) -> BuildPlan:
    """Decide everything, or raise ``ResolveError`` saying what would work instead."""
    targets = _targets(spec, kb)
    decisions: list[Decision] = []
    warnings: list[str] = []

    chosen: _Candidate | None = None
    first_failure: tuple[_Candidate, list[str]] | None = None
    for version in _versions(spec, kb):
        rel = kb.release_of(version)
        assert rel is not None
        for cu in _cuda_options(spec, rel, version):
            cand = _Candidate(version, rel, cu)
            probs = _fits(cand, spec, targets, kb)
            if not probs:
                chosen = cand
                break
            if first_failure is None:
                first_failure = (cand, probs)
        if chosen is not None:
            break
    if chosen is None:
        assert first_failure is not None
        cand, probs = first_failure
        raise ResolveError(
            "; ".join(dict.fromkeys(probs)) + ".",
            hint=_alternatives(spec, targets, kb, cand, probs),
        )

    rel = chosen.release
    version = chosen.version
    py = spec.python.version
    if py in rel.python_experimental:
        warnings.append(f"Python {py} support in torch {rel.series} is experimental upstream.")

    # torch requirement and where it comes from
    if chosen.cuda == "cpu":
        label = "+cpu"
        on_default = False
    elif chosen.cuda == rel.default_cuda:
        label = ""
        on_default = True
    else:
        label = "+" + _variant_name(chosen.cuda)
        on_default = False
    row = None if chosen.cuda == "cpu" else kb.arch_row(rel.series, chosen.cuda)
    torch_plan = TorchPlan(
        version=version,
        variant=_variant_name(chosen.cuda),
        cuda=None if chosen.cuda == "cpu" else chosen.cuda,
        requirement=f"torch=={version}{label}",
        on_default_index=on_default,
        wheel_arch_list=row.arch_list if row else "",
        wheel_arch_source=row.source if row else "",
        companions=_companions(spec, version, rel, label),
    )
    why_version = (
        "pinned in the spec" if spec.torch.version and not any(c in spec.torch.version for c in "<>=!~,")
        else f"newest release satisfying {spec.torch.version or 'any version'} that passes every check"
    )
    decisions.append(Decision("torch", version, why_version, rel.source))
    if chosen.cuda == "cpu":
        decisions.append(Decision("variant", "cpu", "cuda = 'cpu' in the spec", ""))
    else:
        why = "requested in the spec" if spec.torch.cuda != "auto" else (
            "the variant a plain install gets, and it covers every target"
            if on_default else "the newest variant that covers every target within the driver floor"
        )
        decisions.append(Decision("variant", torch_plan.variant, why, rel.source))
        if not on_default:
            decisions.append(Decision(
                "torch index", f"{torch_plan.variant} index",
                f"torch {version}{label} is not the default variant of the package index: the build takes it "
                "from the torch index named in [sources] torch_index / --torch-index / KILN_TORCH_INDEX, "
                "or from a wheel folder", ""))

    # targets
    target_plans: list[TargetPlan] = []
    for t in targets:
        cov = coverage(t.capability, row.entries) if row else None
        target_plans.append(TargetPlan(
            name=t.name, capability=str(t.capability), family=t.family,
            covered=bool(cov and cov.covered), how=cov.how if cov else "no kernel image",
        ))
    if row is not None:
        decisions.append(Decision("wheel archs", row.arch_list,
                                  "compiled into the official wheels of this variant", row.source))

    # arch list for code compiled in the image
    if chosen.cuda == "cpu":
        arch_list = ""
    else:
        caps = [t.capability for t in targets]
        if not caps and row is not None:
            caps = sorted({e.capability for e in row.entries})
        toolkit = kb.toolkit_max_target(chosen.cuda)
        if toolkit is not None:
            lo, hi = toolkit
            bad = [c for c in caps if c < lo or c > hi]
            if bad and targets:
                raise ResolveError(
                    f"CUDA {chosen.cuda} cannot compile for compute capability "
                    f"{', '.join(str(b) for b in bad)} (it targets {lo} to {hi}).",
                    hint="Choose another CUDA variant with [torch] cuda, or drop those targets.",
                )
            caps = [c for c in caps if lo <= c <= hi]
        newest = max(caps) if caps else None
        arch_list = format_arch_list(caps, newest if spec.gpu.ptx else None)
        decisions.append(Decision(
            "TORCH_CUDA_ARCH_LIST", arch_list,
            ("the targets" if targets else "torch's own list (no targets given)")
            + (", with PTX of the newest for forward compatibility" if spec.gpu.ptx else ""),
            "CPPEXT"))

    # driver floor
    if chosen.cuda == "cpu":
        min_driver, min_driver_source, require = None, "", None
    else:
        min_driver, min_driver_source = kb.driver_floor(chosen.cuda)
        major = chosen.cuda.split(".")[0]
        require = f"cuda>={major}.0"
        decisions.append(Decision(
            "driver floor", min_driver,
            f"CUDA {chosen.cuda} runs on any driver of the CUDA {major} family (minor-version compatibility); "
            f"NVIDIA_REQUIRE_CUDA={require}", min_driver_source))

    # extensions
    ext_plans: list[ExtensionPlan] = []
    for ext in spec.extensions:
        info = kb.extensions.get(ext.name)
        env = dict(info.env) if info else {}
        if info and info.arch_env != "TORCH_CUDA_ARCH_LIST" and arch_list:
            env[info.arch_env] = ";".join(
                str(Capability.parse(a.removesuffix("+PTX")).number) for a in arch_list.split(";")
            )
        env.update(ext.env)
        if info is None and ext.path is None:
            warnings.append(
                f"extension {ext.name!r} is not in the knowledge base: built with --no-build-isolation and "
                "TORCH_CUDA_ARCH_LIST, without known requirements."
            )
        ext_plans.append(ExtensionPlan(
            name=ext.name,
            requirement=None if ext.path else (f"{ext.name}=={ext.version}" if ext.version else ext.name),
            path=ext.path,
            import_name=info.import_name if info else ext.name.replace("-", "_"),
            env=tuple(sorted(env.items())),
            no_build_isolation=info.no_build_isolation if info else True,
            memory_per_job_gib=info.memory_per_job_gib if info else 4,
            notes=info.notes if info else "",
            source=info.source if info else "",
        ))

    base_image = spec.base.image or f"python:{py}-slim-bookworm"
    decisions.append(Decision(
        "base image", base_image,
        "given in [base] image" if spec.base.image else
        "official Python slim image: torch's wheels carry their CUDA libraries, so no CUDA base is needed "
        "and the driver comes from the host", ""))

    apt = list(spec.packages.apt)
    if spec.base.python == "apt":
        apt.insert(0, f"python{py}")

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
        app=AppPlan(
            copy=tuple(spec.app.copy_),
            workdir=spec.app.workdir,
            command=tuple(spec.app.command),
            user=spec.app.user,
            env=tuple(sorted(spec.app.env.items())),
        ),
        sources=SourcesPlan(
            index_url=spec.sources.index_url,
            extra_index_urls=tuple(spec.sources.extra_index_urls),
            find_links=tuple(spec.sources.find_links),
            torch_index=spec.sources.torch_index,
            network=spec.sources.network,
        ),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
    )
