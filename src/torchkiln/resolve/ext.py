"""The parts of resolving that ``resolve`` and ``resolve_image`` share: the candidate and target
records, the targets and the image platform of a spec, trying a patched spec for a suggested fix, and
the planning of compiled extensions (their problems against a torch, their git source,
a prebuilt wheel where one matches, the builder stage's plan).

A module of its own so that ``resolve_image`` (a base image that brings its own torch) needs nothing
from ``resolve``, which dispatches to it: no import cycle. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchkiln.arch import Capability, coverage, parse_arch_list
from torchkiln.errors import ResolveError
from torchkiln.knowledge import OCI_PLATFORM, PLATFORMS, Extension, Knowledge, ReleasePlatform, TorchRelease, cuda_key
from torchkiln.plan import AppPlan, Decision, ExtensionPlan, HealthcheckPlan, StepPlan, TorchPlan
from torchkiln.spec import ExtensionSpec, Spec, step_commands

_DEVEL_IMAGE = re.compile(r"(?:^|/)nvidia/cuda:(\d+\.\d+)(?:\.\d+)*-(?:[a-z0-9]+-)*devel\b")
_NGC_IMAGE = re.compile(r"(?:^|/)nvidia/pytorch:(\d\d\.\d\d)-py3")


@dataclass(frozen=True)
class _Target:
    name: str
    capability: Capability
    family: str
    hosts: tuple[str, ...] = ("x86_64", "aarch64")


@dataclass(frozen=True)
class _Candidate:
    version: str
    release: TorchRelease
    cuda: str  # "12.4" or "cpu"
    host: str = "x86_64"  # the image's CPU architecture

    @property
    def on(self) -> ReleasePlatform | None:
        return self.release.on(self.host)


def driver_key(version: str) -> tuple[int, ...]:
    """An NVIDIA driver version ("535.104.05") as numbers, for comparing floors."""
    return tuple(int(p) for p in version.split("."))


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


def _extension_git(ext: ExtensionSpec, info: Extension | None) -> tuple[str | None, str | None]:
    """(repository, ref) for an extension built from git, else (None, None)."""
    where = f"[[extensions]] {ext.name}"
    if ext.git is not None or (info is not None and info.distribution == "git" and ext.path is None):
        if ext.version is not None:
            raise ResolveError(
                f"{where}: {ext.name} is not released on the package index (a package of that name there may be "
                "another project), so 'version' cannot select it.",
                hint="Pin its repository with ref = \"<tag or commit>\" instead of version.",
            )
        if ext.ref is None:
            raise ResolveError(
                f"{where}: a build from a git repository needs a pinned ref, or the image (and the wheel cached "
                "for it) would change whenever the repository does.",
                hint="Add ref = \"<tag or commit>\" to the table.",
            )
        return ext.git or (info.git if info else None), ext.ref
    if ext.ref is not None:
        raise ResolveError(
            f"{where}: 'ref' names a git tag or commit, but {ext.name} is not built from a repository.",
            hint="Add git = \"<repository URL>\", or use version = \"...\" for a release from the package index.",
        )
    return None, None


def _prebuilt(
    ext: ExtensionSpec, info: Extension | None, kb: Knowledge, torch: TorchPlan, python: str,
    caps: list[Capability],
) -> tuple[str | None, str]:
    """(the requirement of an exactly matching prebuilt wheel, or None; why)."""
    if ext.path is not None:
        return None, "a local source tree is always compiled"
    if ext.git is not None or (info is not None and info.distribution == "git"):
        return None, "it is built from its repository"
    if not ext.prebuilt:
        return None, "prebuilt = false in the spec"
    if torch.build is not None:
        return None, "torch itself is compiled from source, so no published wheel was built against it"
    if torch.image is not None:
        return None, ("torch is the base image's own build (NGC and the like build and patch their own), so no "
                      "published wheel was built against it")
    if torch.cuda is None:
        return None, "no prebuilt wheel is known for the CPU build of torch"
    major = torch.cuda.split(".")[0]
    series = ".".join(torch.version.split(".")[:2])
    for row in kb.prebuilt:
        if row.name != ext.name:
            continue
        if ext.version not in row.versions:
            return None, (f"prebuilt wheels are known only for {ext.name} {', '.join(row.versions)}, "
                          f"not {ext.version or 'an unpinned version'}")
        misses = []
        if row.cuda_major != major:
            misses.append(f"CUDA {major} (they are built for CUDA {row.cuda_major})")
        if series not in row.torch or series not in row.abi:
            misses.append(f"torch {series} (they exist for {', '.join(row.torch)})")
        if python not in row.python:
            misses.append(f"Python {python}")
        entries = parse_arch_list(row.archs)
        uncovered = [str(c) for c in caps if not coverage(c, entries).covered]
        if uncovered:
            misses.append(f"compute capability {', '.join(uncovered)} (they carry {row.archs})")
        if misses:
            return None, f"the prebuilt {ext.name} {ext.version} wheels do not match {'; '.join(misses)}"
        abi = row.abi[series]
        py = python.replace(".", "")
        url = row.url.format(version=ext.version, cuda_major=major, torch=series, abi=abi, py=py)
        return f"{ext.name} @ {url}", (
            f"a prebuilt wheel matches exactly ({ext.name} {ext.version}, CUDA {major}, torch {series}, "
            f"cxx11abi {abi}, cp{py}) and its archs {row.archs} cover every target: installed, not compiled")
    if info is not None and info.distribution == "wheel" and python.endswith("t"):
        return None, (f"the package index's {ext.name} wheels are not known to have a free-threaded "
                      f"cp{python.replace('.', '')} build (an abi3 or cp3X wheel does not load in Python {python})")
    if info is not None and info.distribution == "wheel" and ext.version and info.pairs:
        want = info.pairs.get(ext.version)
        if want is not None and Version(torch.version) in SpecifierSet(want) and torch.on_default_index:
            return f"{ext.name}=={ext.version}", (
                f"the package index's {ext.name} {ext.version} wheels are built for torch {want} with its default "
                f"CUDA variant ({torch.variant}): installed, not compiled (their archs are not recorded in the "
                "knowledge base: `kiln inspect` lists them)")
        if want is not None and not torch.on_default_index:
            return None, (f"the package index's {ext.name} wheels are built for the index's default CUDA variant, "
                          f"not {torch.variant}")
    return None, "no prebuilt wheel is known to match this torch, CUDA, Python and these targets"


def _extension_plan(
    ext: ExtensionSpec, spec: Spec, kb: Knowledge, torch: TorchPlan, arch_list: str,
    targets: tuple[_Target, ...], decisions: list[Decision], warnings: list[str],
) -> ExtensionPlan:
    info = kb.extensions.get(ext.name)
    env = dict(info.env) if info else {}
    if info and info.arch_env != "TORCH_CUDA_ARCH_LIST" and arch_list:
        env[info.arch_env] = ";".join(
            str(Capability.parse(a.removesuffix("+PTX")).number) for a in arch_list.split(";")
        )
    env.update(ext.env)
    git, ref = _extension_git(ext, info)
    if info is None and ext.path is None:
        warnings.append(
            f"extension {ext.name!r} is not in the knowledge base: built with --no-build-isolation and "
            "TORCH_CUDA_ARCH_LIST, without known requirements."
        )
    caps = [t.capability for t in targets] or sorted({e.capability for e in parse_arch_list(arch_list)})
    prebuilt, why = _prebuilt(ext, info, kb, torch, spec.python.version, caps)
    requirement = None if ext.path is not None or git is not None else (
        f"{ext.name}=={ext.version}" if ext.version else ext.name)
    plan = ExtensionPlan(
        name=ext.name,
        requirement=requirement,
        path=ext.path,
        import_name=info.import_name if info else ext.name.replace("-", "_"),
        env=tuple(sorted(env.items())),
        no_build_isolation=info.no_build_isolation if info else True,
        memory_per_job_gib=info.memory_per_job_gib if info else 4,
        notes=info.notes if info else "",
        source=info.source if info else "",
        version=ext.version,
        git=git,
        ref=ref,
        build="prebuilt" if prebuilt else "source",
        prebuilt=prebuilt,
        build_requires=info.build_requires if info else ("ninja", "packaging", "pip", "setuptools", "wheel"),
    )
    if prebuilt:
        decisions.append(Decision(f"extension {ext.name}", "prebuilt wheel", why, info.source if info else ""))
    else:
        arch_note = "".join(f", {k}={v}" for k, v in plan.env if info and k == info.arch_env)
        decisions.append(Decision(
            f"extension {ext.name}", f"built from source: {plan.spec}",
            f"{why}; compiled in the extensions stage against torch {torch.version} ({torch.variant}) without "
            f"build isolation for TORCH_CUDA_ARCH_LIST={arch_list or '(none)'}{arch_note}; only its wheel reaches "
            "the runtime", info.source if info else ""))
    return plan


def _base_image_cuda(image: str, kb: Knowledge) -> str | None:
    """The CUDA major.minor of a base image that ships nvcc (NVIDIA devel or NGC PyTorch images), else None."""
    m = _DEVEL_IMAGE.search(image)
    if m:
        return m.group(1)
    m = _NGC_IMAGE.search(image)
    if m:
        row = next((r for r in kb.ngc if r.ngc == m.group(1)), None)
        return ".".join(row.cuda.split(".")[:2]) if row else None
    return None


#: a change to a spec: ``{table: {key: value}}`` sets keys, ``{table: [...]}`` replaces the table
Patch = dict[str, Any]


def _targets(spec: Spec, kb: Knowledge) -> tuple[_Target, ...]:
    out: list[_Target] = []
    for name in spec.gpu.targets:
        label, cap, gpu = kb.lookup_gpu_entry(name)
        if gpu is not None and gpu.tegra:
            raise ResolveError(
                f"target {name!r} (compute capability {cap}) is a Jetson (Tegra) module: its integrated GPU runs "
                "NVIDIA's L4T/JetPack software stack, and neither the x86_64 nor the Arm server (SBSA) torch "
                "wheels support it.",
                hint="Remove it from [gpu] targets; for Jetson, build on NVIDIA's L4T/JetPack images "
                "(nvcr.io/nvidia/l4t-jetpack, or the PyTorch images of dusty-nv/jetson-containers), which carry "
                "a torch built for Tegra. Jetson Thor (JetPack 7, SBSA) is supported: name it 'Jetson Thor'.",
            )
        family = gpu.family if gpu is not None else ""
        out.append(_Target(label, cap, family, gpu.hosts if gpu is not None else ("x86_64", "aarch64")))
    # stable order, no duplicates by name
    seen: set[str] = set()
    uniq = []
    for t in out:
        if t.name not in seen:
            seen.add(t.name)
            uniq.append(t)
    return tuple(uniq)


def _host(spec: Spec, targets: tuple[_Target, ...]) -> tuple[str, str]:
    """The image's CPU architecture ("x86_64" / "aarch64") and why.

    Named in [image] platform: every target must be found with that host. Otherwise inferred: each
    target's usual host (the first of its ``hosts``); targets that disagree are an error, because one
    image runs on one CPU architecture (build one image per platform instead).
    """
    if spec.image.platform is not None:
        host = PLATFORMS[spec.image.platform]
        wrong = [t for t in targets if host not in t.hosts]
        if wrong:
            names = ", ".join(f"{t.name} ({'/'.join(t.hosts)} hosts)" for t in wrong)
            other = OCI_PLATFORM[wrong[0].hosts[0]]
            raise ResolveError(
                f"[image] platform = {spec.image.platform!r}, but {names} never run on {host} machines: "
                f"a {spec.image.platform} image does not start there.",
                hint=f"Set [image] platform = {other!r} (or remove it to infer it from the targets), or build "
                "one image per platform, each spec with its own targets.",
            )
        return host, "named in [image] platform"
    usual: dict[str, list[str]] = {}
    for t in targets:
        usual.setdefault(t.hosts[0], []).append(t.name)
    if len(usual) > 1:
        groups = "; ".join(f"{', '.join(n)} on {h} ({OCI_PLATFORM[h]})" for h, n in usual.items())
        raise ResolveError(
            f"the targets run on different CPU architectures ({groups}); one image runs on one platform.",
            hint="Build one image per platform: one spec with [image] platform = \"linux/arm64\" and the Arm "
            "(Grace) targets, one with \"linux/amd64\" and the others. If every one of these GPUs sits in an "
            "Arm server, set [image] platform = \"linux/arm64\" in this spec.",
        )
    if usual:
        host = next(iter(usual))
        if host != "x86_64":
            return host, f"the targets' hosts are {host} ({', '.join(usual[host])})"
        return host, "the targets run in x86_64 hosts (the default; set [image] platform to change it)"
    return "x86_64", "no targets name another platform (the default; set [image] platform to change it)"


#: set while a suggested fix is being tried, so that the trial's own errors skip suggesting
_SUGGESTING: ContextVar[bool] = ContextVar("kiln_suggesting", default=False)


def _patched(spec: Spec, patch: Patch) -> Spec | None:
    """``spec`` with ``patch`` applied: ``{table: {key: value}}`` sets keys, ``{table: [...]}`` replaces."""
    data = spec.model_dump(by_alias=True, exclude_unset=True)
    for table, value in patch.items():
        data[table] = {**data.get(table, {}), **value} if isinstance(value, dict) else value
    try:
        return Spec.model_validate(data)
    except ValueError:
        return None


def app_plan(spec: Spec) -> AppPlan:
    """``[app]`` as the plan holds it (the same for every resolver)."""
    a = spec.app
    hc = a.healthcheck
    return AppPlan(
        copy=tuple(a.copy_), workdir=a.workdir, command=tuple(a.command), user=a.user,
        env=tuple(sorted(a.env.items())), entrypoint=tuple(a.entrypoint), expose=tuple(a.expose),
        healthcheck=None if hc is None else HealthcheckPlan(tuple(hc.command), hc.interval, hc.timeout,
                                                            hc.start_period, hc.retries),
    )


def step_plans(spec: Spec) -> tuple[StepPlan, ...]:
    """``[[steps]]`` in spec order, each with its commands split out (``spec.step_commands``)."""
    return tuple(
        StepPlan(index=i, after=s.after, name=s.name, commands=tuple(step_commands(s.run)), cache=tuple(s.cache),
                 secrets=tuple(s.secrets), env=tuple(sorted(s.env.items())))
        for i, s in enumerate(spec.steps, 1)
    )
