"""``[project]``: the project's facts (``torchkiln.project.ProjectFacts``) into the plan. Pure.

torch pinned by the project (a lock's ``torch 2.7.1+cu128``, a requirements file's
``torch==2.7.1+cu128``, or torch mapped to a PyTorch index in ``[tool.uv.sources]``) becomes the
spec's ``[torch] version``/``cuda`` and is resolved exactly like a torch torchkiln chose: against
``[gpu] targets`` and ``min_driver``. A failure names the project's entry; fixes that change torch are
said as changes to the project (re-lock), fixes of the spec (targets, driver) stay patches. When the
project does not pin torch, torchkiln's torch constrains the project's install (the constraints
file); a project dependency that needs another torch is named here where it can be known (torch
itself, torchvision, torchaudio).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from torchkiln.errors import ResolveError
from torchkiln.knowledge import Knowledge
from torchkiln.plan import BuildPlan, Decision, ProjectPlan
from torchkiln.spec import Spec

if TYPE_CHECKING:
    from torchkiln.image_facts import ImageFacts
    from torchkiln.project import ProjectFacts, TorchPin

Resolver = Callable[..., BuildPlan]


def _variant(cuda: str) -> str:
    return "cpu" if cuda == "cpu" else "cu" + cuda.replace(".", "")


def project_torch_spec(spec: Spec, project: ProjectFacts) -> Spec:
    """The spec with the project's torch in ``[torch]`` (version and variant), or an error when they disagree."""
    pin = project.torch
    if pin is None:
        return _wanted_spec(spec, project)
    if spec.torch.source != "wheel":
        raise ResolveError(
            f"{pin.where} pins torch, but [torch] source = \"{spec.torch.source}\" takes torch from "
            f"{'the base image' if spec.torch.source == 'image' else 'a source build'}; an image holds one torch.",
            hint="Remove [torch] source to install the project's torch, or remove torch from the project's "
            "dependencies (and re-lock) to keep the other torch.")
    if spec.torch.version:
        try:
            ok = Version(pin.version) in SpecifierSet(spec.torch.version) if any(
                c in spec.torch.version for c in "<>=!~") else Version(pin.version) == Version(spec.torch.version)
        except (InvalidSpecifier, ValueError):
            ok = False
        if not ok:
            raise ResolveError(
                f"{pin.where} pins torch {pin.version}, but [torch] version = \"{spec.torch.version}\" in the spec.",
                hint="Remove [torch] version from the spec (the project's lock decides torch), or lock the project "
                f"with a torch that satisfies {spec.torch.version}.")
    if pin.cuda != "auto" and spec.torch.cuda != "auto" and pin.cuda != spec.torch.cuda:
        raise ResolveError(
            f"{pin.where} is the {_variant(pin.cuda)} build of torch, but [torch] cuda = \"{spec.torch.cuda}\" in "
            "the spec.",
            hint="Remove [torch] cuda from the spec (the project's lock decides the variant), or lock the project "
            f"with torch's {_variant(spec.torch.cuda)} build.")
    cuda = pin.cuda if pin.cuda != "auto" else spec.torch.cuda
    return spec.model_copy(update={"torch": spec.torch.model_copy(update={"version": pin.version, "cuda": cuda})})


def _wanted_spec(spec: Spec, project: ProjectFacts) -> Spec:
    """A project that names torch without pinning it ("torch>=2.4"): the spec's torch must satisfy it; a PyTorch
    index it names for torch chooses the variant when the spec leaves ``cuda`` to torchkiln."""
    if project.torch_index and spec.torch.cuda == "auto" and spec.torch.source == "wheel":
        from torchkiln.project import TorchPin

        cuda = TorchPin("", "", project.torch_index, "").cuda
        if cuda != "auto":
            spec = spec.model_copy(update={"torch": spec.torch.model_copy(update={"cuda": cuda})})
    wanted = [(text, where) for text, where in project.torch_wanted if str(Requirement(text).specifier)]
    if not wanted or spec.torch.source != "wheel":
        return spec
    combined = SpecifierSet(",".join(str(Requirement(t).specifier) for t, _ in wanted))
    if not spec.torch.version:
        return spec.model_copy(update={"torch": spec.torch.model_copy(update={"version": str(combined)})})
    try:
        exact = Version(spec.torch.version)
    except ValueError:
        return spec.model_copy(update={"torch": spec.torch.model_copy(
            update={"version": f"{spec.torch.version},{combined}"})})
    bad = [(t, w) for t, w in wanted if exact not in Requirement(t).specifier]
    if bad:
        text, where = bad[0]
        raise ResolveError(
            f"{where} requires {text}, but the spec's [torch] version is {spec.torch.version}.",
            hint=f"Set [torch] version to a release that satisfies {text} (or remove it and let torchkiln choose), "
            "or relax the project's torch requirement.")
    return spec


#: the Pythons a project's requires-python may choose from, newest first (torch's own range is checked by resolve)
_PYTHONS = ("3.13", "3.12", "3.11", "3.10", "3.9")


def _python_spec(spec: Spec, project: ProjectFacts) -> Spec:
    """The project's Python (uv's .python-version) when the spec names none; it must satisfy requires-python."""
    chosen = "version" in spec.python.model_fields_set
    if not chosen and project.python:
        spec = spec.model_copy(update={"python": spec.python.model_copy(update={"version": project.python})})
        chosen = True
    if not chosen and project.requires_python:  # the newest Python the project allows, when the default is not
        try:
            allowed = SpecifierSet(project.requires_python)
            fits = [v for v in _PYTHONS if Version(v) in allowed or Version(v + ".99") in allowed]
        except InvalidSpecifier:
            fits = []
        if fits and spec.python.version not in fits:
            spec = spec.model_copy(update={"python": spec.python.model_copy(update={"version": fits[0]})})
    if project.requires_python:
        try:
            ok = Version(spec.python.version) in SpecifierSet(project.requires_python) or Version(
                spec.python.version + ".99") in SpecifierSet(project.requires_python)
        except (InvalidSpecifier, ValueError):
            ok = True
        if not ok:
            raise ResolveError(
                f"the project requires Python {project.requires_python} ([project] requires-python), but the image's "
                f"Python is {spec.python.version}.",
                hint="Set [python] version to a release that satisfies it (e.g. in [tool.kiln.python] or kiln.toml), "
                "or give the project a .python-version file.")
    return spec


def _relock_text(text: str, patch: dict[str, object], pin: TorchPin) -> str:
    """A fix that changes torch, said as the change to the project that makes it."""
    torch = patch.get("torch")
    if not isinstance(torch, dict) or len(patch) != 1:
        return ""
    version, cuda = str(torch.get("version", pin.version)), str(torch.get("cuda", pin.cuda))
    if torch.get("source"):
        return ""
    variant = _variant(cuda) if cuda != "auto" else ""
    index = f"https://download.pytorch.org/whl/{variant}" if variant else "PyPI"
    return (f"lock the project with torch {version}{'+' + variant if variant else ''} (torch from {index} in "
            f"[tool.uv.sources], `uv lock`)")


def _rewrap(e: ResolveError, pin: TorchPin) -> ResolveError:
    """The resolver's error about the project's torch: named after the lock entry; torch fixes as re-locks."""
    texts = e.hint.removeprefix("Would work: ").rstrip(".").split("; or ") if e.hint.startswith("Would work: ") \
        else []
    kept: list[str] = []
    fixes = []
    if len(texts) == len(e.fixes):
        for text, patch in zip(texts, e.fixes, strict=True):
            relock = _relock_text(text, dict(patch), pin)
            if relock:
                kept.append(relock)
            elif "torch" not in patch:
                kept.append(text)
                fixes.append(patch)
    hint = ("Would work: " + "; or ".join(kept) + ".") if kept else (
        "Lock the project with a torch variant that covers every target (e.g. torch from "
        "https://download.pytorch.org/whl/cu128 in [tool.uv.sources], then `uv lock`), or change [gpu].")
    return ResolveError(f"{pin.where} (the project's torch): {e.message}", hint=hint, fixes=tuple(fixes),
                        details=e.details)


def _companion_problems(plan: BuildPlan, project: ProjectFacts, kb: Knowledge) -> None:
    """torchvision/torchaudio pinned by the project must be the ones built for the image's torch."""
    release = kb.release_of(plan.torch.version)
    for r in project.requirements:
        if r.name not in ("torchvision", "torchaudio"):
            continue
        pins = [s.version.split("+")[0] for s in r.requirement.specifier if s.operator in ("==", "===")]
        if not pins:
            continue
        if r.name == "torchvision":
            if release is None or plan.torch.version not in release.torchvision:
                continue
            want = release.torchvision[plan.torch.version]
            needs = next((t for rel in kb.releases for t, tv in rel.torchvision.items() if tv == pins[0]), "")
        else:
            want, needs = plan.torch.version, pins[0]
        if pins[0] != want:
            raise ResolveError(
                f"{r.where}: {r.line.split(' --hash', 1)[0]} is built for torch {needs or 'another release'}, but "
                f"the image's torch is {plan.torch.version} ({plan.torch.requirement}); it would replace torch or "
                "fail to load.",
                hint=f"Require {r.name}=={want} in the project (the release built for torch {plan.torch.version}), or "
                f"pin torch {needs or 'to the release it was built for'} in the spec or the project.")


def resolve_project(spec: Spec, kb: Knowledge, facts: ImageFacts | None, project: ProjectFacts,
                    *, own: Resolver) -> BuildPlan:
    """Resolve a spec with ``[project]``: the project's torch (if it pins one) checked like any other."""
    if spec.torch.source == "image":
        raise ResolveError(
            "[project] is not supported with [torch] source = \"image\" yet: the project's dependencies would be "
            "installed over the base image's own torch without the checks a torchkiln venv gets.",
            hint="Use [torch] source = \"wheel\" (the default) with [project], or list the dependencies in "
            "[packages] pip.")
    effective = project_torch_spec(_python_spec(spec, project), project)
    pin = project.torch
    try:
        plan = own(effective, kb, facts)
    except ResolveError as e:
        if pin is None:
            raise
        raise _rewrap(e, pin) from None
    _companion_problems(plan, project, kb)
    if pin is not None and pin.local and "+" not in plan.torch.requirement:
        # the default index's build of this variant has no label; the project's pin names it: keep the pin's
        plan = replace(plan, torch=replace(plan.torch, requirement=f"torch=={pin.version}+{pin.local}",
                                           on_default_index=False))
    decisions = list(plan.decisions)
    if pin is not None:
        decisions.append(Decision("torch from the project", plan.torch.requirement,
                                  f"{pin.where}: resolved against [gpu] targets and min_driver like any torch", ""))
    else:
        decisions.append(Decision("torch for the project", plan.torch.requirement,
                                  "the project does not pin torch: torchkiln's torch constrains the project's install "
                                  "(the constraints file), so no dependency can replace it", ""))
    if pin is not None and pin.index and not plan.torch.on_default_index:
        plan = replace(plan, sources=replace(plan.sources, project_torch_index=pin.index))
        decisions.append(Decision(
            "torch index from the project", pin.index,
            "the build takes torch from it when no flag, KILN_* variable, [sources] entry or wheel folder names a "
            "package source (a mirror keeps precedence)", ""))
    what = {"uv.lock": "exactly the lock (uv export --frozen, hashes kept)",
            "requirements": "the requirements files' lines" + (" and the pyproject's dependencies" if project.name
                                                                else ""),
            "pyproject": "the pyproject's dependencies" + (", extras" if project.extras else "")
            + (", groups" if project.groups else ""),
            "script": f"the inline metadata of {project.script} (PEP 723)",
            "none": "none (the project names no dependencies)"}[project.source]
    decisions.append(Decision("project dependencies", f"{len(project.requirements)} from {project.source}",
                              f"{', '.join(project.files) or project.root}: {what}; one layer per package", ""))
    if project.package:
        decisions.append(Decision(
            "project package", project.name or project.root,
            "built into a wheel in the project-build stage (" + ("compiled against the image's torch, "
                                                                 if project.compiled else "")
            + "no build isolation, against the installed dependencies), installed without dependencies in a "
            "layer of its own after them: an edit to its code rebuilds only that layer", ""))
    app = plan.app
    if not project.package and not app.copy:
        decisions.append(Decision("project files", f"{project.root} -> {app.workdir}",
                                  "the project is not a package (no [build-system], no setup.py): its files are "
                                  "copied into the working folder", ""))
    reqs = project.requirements
    if project.script and not app.command:
        app = replace(app, command=("python", project.script))
        decisions.append(Decision("command", f"python {project.script}", "the project's PEP 723 script", ""))
    return replace(
        plan,
        app=app,
        decisions=tuple(decisions),
        warnings=(*plan.warnings, *project.notes),
        project=ProjectPlan(
            root=project.root, name=project.name, source=project.source, files=project.files,
            requirements=tuple(r.line for r in reqs), names=tuple(r.name for r in reqs),
            torch_requirements=tuple(r.line for r in project.torch_requirements),
            constraints=project.constraints, hashed=project.hashed, package=project.package,
            compiled=project.compiled, build_requires=project.build_requires, scm_version=project.scm_version,
            wheel_deps=project.wheel_deps, entries=project.entries, torch_from=pin.where if pin else "",
            locals=project.locals,
        ),
    )
