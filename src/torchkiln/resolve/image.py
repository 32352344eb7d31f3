"""resolve for ``[torch] source = "image"``: the base image's own torch is the torch. Pure: no I/O.

The facts come from the image itself (:mod:`torchkiln.images.facts`, read before resolve), or, when
the image could not be read, from the knowledge base's NGC row (said in a warning). The checks, in
order: torch version, CUDA and Python asserted against the spec; the targets against the SASS/PTX
entries of the image's ``libtorch_cuda.so`` (the "no kernel image" failure, refused before anything
builds); the driver floor of torch's CUDA (NGC's own driver notes quoted); extensions against the
image's torch, compiled with the image's own nvcc. Packages are installed against the image's
constraints file plus a pin of its torch, so nothing can replace it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from torchkiln.arch import Capability, coverage, format_arch_list
from torchkiln.errors import KilnError, ResolveError
from torchkiln.knowledge import OCI_PLATFORM, PLATFORMS, Knowledge, NgcRelease
from torchkiln.plan import (
    BuildPlan,
    Decision,
    ExtensionPlan,
    ImageTorchPlan,
    SourcesPlan,
    TargetPlan,
    ToolchainPlan,
    TorchPlan,
)
from torchkiln.resolve.ext import (
    _SUGGESTING,
    Patch,
    _Candidate,
    _extension_plan,
    _extension_problems,
    _host,
    _patched,
    _targets,
    app_plan,
    driver_key,
    step_plans,
)
from torchkiln.spec import Spec

if TYPE_CHECKING:
    from torchkiln.image_facts import ImageFacts

_BUILDER_APT = ("build-essential", "ccache")


def _version_matches(asked: str, have: str) -> bool:
    v = Version(have)
    try:
        exact = Version(asked)
    except InvalidVersion:
        return SpecifierSet(asked).contains(v, prereleases=True) or SpecifierSet(asked).contains(
            Version(v.public), prereleases=True)
    return v == exact or (not exact.local and Version(v.public) == exact)


#: how ``resolve`` is called: a spec with kiln's own torch → its plan
Resolver = Callable[[Spec, Knowledge], BuildPlan]


def _fixes(
    spec: Spec, kb: Knowledge, facts: ImageFacts, ideas: list[tuple[str, Patch]], own: Resolver
) -> tuple[str, tuple[Patch, ...]]:
    """The ideas that resolve when applied (against the same image facts, or kiln's own torch)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if _SUGGESTING.get():
        return "", ()
    for text, patch in ideas:
        patched = _patched(spec, patch)
        if patched is None:
            continue
        token = _SUGGESTING.set(True)
        try:
            if patched.torch.source == "image":
                resolve_image(patched, kb, facts, own=own)
            else:
                own(patched, kb)
        except KilnError:
            continue
        finally:
            _SUGGESTING.reset(token)
        found.append((text, patch))
    if not found:
        return "", ()
    return "Would work: " + "; or ".join(t for t, _ in found) + ".", tuple(p for _, p in found)


def _own_torch_idea(spec: Spec) -> tuple[str, dict[str, Any]]:
    return ('kiln\'s own torch instead of the image\'s ([torch] source = "wheel", no [base] image)',
            {"torch": {"source": "wheel", "version": ""}, "base": {"image": ""}})


def _facts(
    spec: Spec, kb: Knowledge, facts: ImageFacts | None, warnings: list[str]
) -> tuple[ImageFacts, NgcRelease | None]:
    from torchkiln.image_facts import cross_check, facts_from_ngc_row, ngc_row_for

    image = spec.base.image
    row = ngc_row_for(image, facts, kb)
    if facts is None:
        if row is None:
            raise ResolveError(
                f"[torch] source = \"image\": kiln could not read {image} (the local container engine does not have "
                "it) and the knowledge base has no row for it, so its torch, CUDA, Python and archs are unknown.",
                hint=f"Pull or build the image first (`docker pull {image}`), then run kiln again: it reads those "
                "facts from the image itself, without running it.",
            )
        warnings.append(
            f"{image} was not read (it is not in the local engine): its facts come from the knowledge base's NGC "
            f"{row.ngc} row ({row.source}); pull it and run kiln again to check them against the image itself."
        )
        return facts_from_ngc_row(image, row, kb), row
    for note in facts.notes:
        warnings.append(f"{image}: {note}.")
    disagree = cross_check(facts, row)
    if disagree and row is not None:
        warnings.append(
            f"{image} disagrees with the knowledge base's NGC {row.ngc} row: the image has "
            + "; ".join(disagree) + ". kiln uses what the image holds."
        )
    return facts, row


def resolve_image(spec: Spec, kb: Knowledge, facts: ImageFacts | None, *, own: Resolver) -> BuildPlan:
    """The plan for a spec whose torch is the base image's; raises ``ResolveError`` with fixes.

    ``own``: the resolver of specs with kiln's own torch (``torchkiln.resolve.resolve``, which calls
    this one), for checking the fixes that suggest it.
    """

    image = spec.base.image
    decisions: list[Decision] = []
    warnings: list[str] = []
    facts, row = _facts(spec, kb, facts, warnings)
    targets = _targets(spec, kb)
    host, why_host = _host(spec, targets)
    platform = OCI_PLATFORM[host]
    if facts.platform in PLATFORMS and facts.platform != platform:
        if spec.image.platform is not None or any(PLATFORMS[facts.platform] not in t.hosts for t in targets):
            raise ResolveError(
                f"{image} is a {facts.platform} image, but the spec builds for {platform} ({why_host}).",
                hint=f"Use the {platform} variant of the image, or set [image] platform = {facts.platform!r}.",
            )
        platform, host, why_host = facts.platform, PLATFORMS[facts.platform], f"the platform of {image}"

    # what the spec asserts about the image's torch
    problems: list[str] = []
    ideas: list[tuple[str, dict[str, Any]]] = []
    if spec.torch.version and not _version_matches(spec.torch.version, facts.torch_version):
        problems.append(
            f"{image} brings torch {facts.torch_version}, but [torch] version asks for {spec.torch.version}")
        ideas.append((f'[torch] version = "{facts.torch_version}" (or no version: the image decides)',
                      {"torch": {"version": facts.torch_version}}))
    cuda = facts.torch_cuda
    variant = "cpu" if cuda is None else "cu" + cuda.replace(".", "")
    if spec.torch.cuda == "cpu" and cuda is not None:
        problems.append(f"the torch of {image} is a CUDA {cuda} build, but [torch] cuda = \"cpu\"")
        ideas.append((f'[torch] cuda = "{cuda}"', {"torch": {"cuda": cuda}}))
    elif spec.torch.cuda not in ("auto", "cpu") and spec.torch.cuda != cuda:
        problems.append(f"the torch of {image} is {'a CPU build' if cuda is None else f'built with CUDA {cuda}'}, "
                        f"but [torch] cuda = \"{spec.torch.cuda}\"")
        ideas.append((f'[torch] cuda = "{cuda or "cpu"}"', {"torch": {"cuda": cuda or "cpu"}}))
    if "version" in spec.python.model_fields_set and spec.python.version != facts.python:
        problems.append(f"torch in {image} is installed for Python {facts.python}, but [python] version = "
                        f"\"{spec.python.version}\"")
        ideas.append((f'[python] version = "{facts.python}"', {"python": {"version": facts.python}}))

    # targets against the archs of the image's libtorch_cuda.so
    entries = facts.entries
    where = "read from the image" if facts.origin == "image" else "from the knowledge base"
    target_plans: list[TargetPlan] = []
    uncovered: list[str] = []
    if cuda is None and targets:
        problems.append(f"the torch of {image} is a CPU build: it runs no GPU kernels, but [gpu] targets are set")
        ideas.append(("no [gpu] targets", {"gpu": {"targets": []}}))
    toolkit = kb.toolkit_max_target(facts.nvcc_cuda or cuda) if cuda else None
    for t in targets:
        if entries:
            cov = coverage(t.capability, entries)
            if not cov.covered:
                uncovered.append(t.name)
                problems.append(
                    f"torch {facts.torch_version} in {image} has no kernel image for {t.name} (compute capability "
                    f"{t.capability}): its {facts.arch_source or 'libtorch_cuda.so'} carries "
                    f"{' '.join(facts.arch_entries)} ({where})")
            target_plans.append(TargetPlan(t.name, str(t.capability), t.family, cov.covered, cov.how))
        elif cuda is not None:
            if toolkit is not None and not toolkit[0] <= t.capability:
                uncovered.append(t.name)
                problems.append(f"CUDA {cuda} (the image's torch) supports compute capability {toolkit[0]} and newer: "
                                f"{t.name} is {t.capability}")
            target_plans.append(TargetPlan(t.name, str(t.capability), t.family, False,
                                           "not checked: the image's archs are unknown"))
    if cuda is not None and targets and not entries:
        warnings.append(f"the SASS/PTX list of the torch in {image} is unknown ({facts.arch_source or 'not read'}), "
                        "so whether it runs on the targets is not checked; pull the image to have it read.")
    keep = [t.name for t in targets if t.name not in uncovered]
    if uncovered and keep:
        ideas.append((f"drop {', '.join(uncovered)} from [gpu] targets (targets = {keep})",
                      {"gpu": {"targets": keep}}))
    if uncovered:
        ideas.append(_own_torch_idea(spec))

    # the driver floor of torch's CUDA
    min_driver = min_driver_source = require = None
    if cuda is not None:
        floor, src = kb.driver_floor(cuda)
        ngc_note = f" NGC {row.ngc}: {row.driver_note}." if row is not None and row.driver_note else ""
        if spec.gpu.min_driver is not None and driver_key(spec.gpu.min_driver) < driver_key(floor):
            problems.append(
                f"the torch of {image} is built with CUDA {cuda}, which needs driver {floor} or newer, but the image "
                f"must run on driver {spec.gpu.min_driver}.{ngc_note}".rstrip("."))
            ideas.append(_own_torch_idea(spec))
        min_driver, min_driver_source = floor, src
        require = f"cuda>={cuda.split('.')[0]}.0"
        decisions.append(Decision(
            "driver floor", floor,
            f"the image's torch is built with CUDA {cuda}: any driver of the CUDA {cuda.split('.')[0]} family runs it "
            f"(minor-version compatibility); NVIDIA_REQUIRE_CUDA={require}.{ngc_note}", src))

    if problems:
        hint, fixes = _fixes(spec, kb, facts, ideas, own)
        raise ResolveError(
            "; ".join(dict.fromkeys(problems)) + ".",
            hint=hint or f"Choose a base image whose torch fits, or {_own_torch_idea(spec)[0]}.", fixes=fixes)

    # the torch plan
    ngc = facts.ngc_release or (row.ngc if row is not None else "")
    devel = bool(facts.cuda_home)
    image_plan = ImageTorchPlan(
        python_exe=facts.python_exe, site=facts.site, constraints=facts.constraints_path,
        cuda_home=facts.cuda_home, nvcc_cuda=facts.nvcc_cuda, ngc=ngc,
        facts=(f"read from the image ({facts.image_id or image})" if facts.origin == "image"
               else f"knowledge base row NGC {row.ngc if row else '?'} (the image was not read)"),
        devel=devel,
    )
    torch_plan = TorchPlan(
        version=facts.torch_version, variant=variant, cuda=cuda, requirement=f"torch=={facts.torch_version}",
        on_default_index=False, wheel_arch_list=facts.arch_list, wheel_arch_source=facts.arch_source,
        companions=(), image=image_plan,
    )
    decisions.append(Decision("platform", platform, why_host, ""))
    decisions.append(Decision(
        "torch", f"{facts.torch_version} (the image's own)",
        f"[torch] source = 'image': {image} brings torch {facts.torch_version} for Python {facts.python} at "
        f"{facts.site}; facts {image_plan.facts}; it is never replaced: every install is constrained to it",
        row.source if row is not None else ""))
    if cuda is not None and entries:
        decisions.append(Decision("wheel archs", facts.arch_list,
                                  f"the SASS/PTX entries of {facts.arch_source} ({where})", ""))
    constraint_why = (
        f"the image's {facts.constraints_path} ({facts.constraints_count or 'its'} pins) and a pin of its torch: "
        "a package that needs another torch fails to install instead of replacing it; PIP_CONSTRAINT is never "
        "cleared" if facts.constraints_path else
        "the image ships no constraints file: kiln pins the image's torch for every install")
    decisions.append(Decision("constraints", facts.constraints_path or f"torch=={facts.torch_version}",
                              constraint_why, ""))

    # arch list for code compiled in the image
    arch_list = ""
    if cuda is not None:
        caps = [t.capability for t in targets] or sorted({e.capability for e in entries})
        if toolkit is not None:
            lo, hi = toolkit
            caps = [c for c in caps if lo <= c <= hi]
        arch_list = format_arch_list(caps, max(caps) if caps and spec.gpu.ptx else None)
        decisions.append(Decision(
            "TORCH_CUDA_ARCH_LIST", arch_list or "(none)",
            ("the targets" if targets else "the image's own torch archs (no targets given)")
            + (", with PTX of the newest for forward compatibility" if spec.gpu.ptx else ""), "CPPEXT"))

    # extensions: compiled against the image's torch with the image's nvcc
    cand = _Candidate(Version(facts.torch_version).base_version, kb.releases[0], cuda or "cpu", host)
    ext_problems = [p for ext in spec.extensions for p in _extension_problems(ext, cand, targets, kb)]
    if ext_problems:
        raise ResolveError("; ".join(dict.fromkeys(ext_problems)) + ".",
                           hint="Drop the extension, or choose a base image whose torch it supports.")
    ext_plans = [_extension_plan(ext, spec, kb, torch_plan, arch_list, targets, decisions, warnings)
                 for ext in spec.extensions]
    toolchain = _toolchain(image, facts, ext_plans, decisions, warnings)

    decisions.append(Decision("base image", image, "given in [base] image; its torch is the torch", ""))
    size = f" ({facts.image_size / 1e9:.1f} GB)" if facts.image_size else ""
    #: kiln's own torch images as measured by bench/bench_build.py (bench/results/): the slim alternative
    slim = ("5.9 GB for torch 2.14.1 cu130 + torchvision (bench/results/cu130-torchkiln.json)" if cuda else
            "0.87 GB for torch 2.13.0+cpu (bench/results/cpu.json)")
    if facts.image_size:
        slim += f", against {facts.image_size / 1e9:.1f} GB for {image} before your packages"
    if devel:
        decisions.append(Decision(
            "runtime stage", f"{image}{size} + your packages",
            f"{image} is already a development image (nvcc {facts.nvcc_cuda or '?'} in {facts.cuda_home}, CUDA "
            "headers, compilers): the runtime stage is that image plus your packages and extensions, and kiln "
            "makes no slim stage from it. The slim alternative is kiln's own torch stage ([torch] source = "
            f"'wheel' without [base] image): torch's wheels and their CUDA libraries only, no compiler; measured "
            f"{slim}", ""))
    return BuildPlan(
        image_name=spec.image.name,
        tag=spec.image.tag,
        python=facts.python,
        python_exe=facts.python_exe,
        python_source="image",
        base_image=image,
        torch=torch_plan,
        targets=tuple(target_plans),
        arch_list=arch_list,
        min_driver=min_driver,
        min_driver_source=min_driver_source or "",
        nvidia_require_cuda=require,
        pip_packages=tuple(spec.packages.pip),
        apt_packages=tuple(dict.fromkeys(spec.packages.apt)),
        extensions=tuple(ext_plans),
        app=app_plan(spec),
        steps=step_plans(spec),
        sources=SourcesPlan(index_url=spec.sources.index_url, extra_index_urls=tuple(spec.sources.extra_index_urls),
                            find_links=tuple(spec.sources.find_links), torch_index=spec.sources.torch_index,
                            network=spec.sources.network),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
        toolchain=toolchain,
        dev_toolchain=toolchain,
        bytecode="imports",
        precompile=("torch",),
        platform=platform,
    )


def _toolchain(image: str, facts: ImageFacts, exts: list[ExtensionPlan], decisions: list[Decision],
               warnings: list[str]) -> ToolchainPlan | None:
    """The image's own compiler for the extensions: its nvcc, when it is torch's CUDA."""
    if not any(e.build == "source" for e in exts):
        return None
    cuda = facts.torch_cuda
    apt = () if facts.cuda_home else _BUILDER_APT
    if cuda is None:
        decisions.append(Decision("toolchain", "host C++ compiler", "CPU torch: extensions compile with g++ alone", ""))
        return ToolchainPlan("image", "", (), (), "", apt, "")
    if not facts.cuda_home or not facts.nvcc_cuda:
        raise ResolveError(
            f"{', '.join(e.name for e in exts)} must be compiled against the torch of {image} (CUDA {cuda}), but the "
            "image has no nvcc (/usr/local/cuda/bin/nvcc).",
            hint="Build on the image's development variant (NGC's PyTorch images carry nvcc), or use [torch] "
            "source = \"wheel\" where kiln brings torch's own CUDA compiler.",
        )
    if facts.nvcc_cuda.split(".")[0] != cuda.split(".")[0]:
        raise ResolveError(
            f"the nvcc of {image} is CUDA {facts.nvcc_cuda} but its torch is built with CUDA {cuda}: extensions "
            "compiled with it would not load.",
            hint="Use an image whose nvcc and torch agree (NGC's do).",
        )
    if facts.nvcc_cuda != cuda:
        warnings.append(f"the nvcc of {image} is CUDA {facts.nvcc_cuda}, torch's is {cuda}: same major, so "
                        "torch's extension builder accepts it (minor-version compatibility).")
    decisions.append(Decision(
        "toolchain", f"the image's nvcc (CUDA {facts.nvcc_cuda})",
        f"{image} carries nvcc {facts.nvcc_cuda} in {facts.cuda_home}, the CUDA torch was built with: extensions are "
        "compiled with it, without build isolation, in a builder stage", ""))
    return ToolchainPlan("image", cuda, (), (), facts.cuda_home, apt, "")


def capability(text: str) -> Capability:
    return Capability.parse(text)
