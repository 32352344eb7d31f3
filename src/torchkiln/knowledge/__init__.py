"""The knowledge base: facts about torch wheels, CUDA, drivers, GPUs, NGC and extensions.

The facts are data (``*.toml`` beside this module, every row citing a key of ``sources.toml``);
this module only loads them into frozen dataclasses and answers look-ups. No decisions here:
those are the resolver's.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package (a dependency there)
    import tomli as tomllib

from packaging.version import Version

from torchkiln.arch import ArchEntry, Capability, parse_arch_list
from torchkiln.errors import ResolveError

#: the host CPU architectures torch wheels are built for, by the OCI platform of an image
PLATFORMS: dict[str, str] = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
#: the other way round: host architecture -> OCI platform
OCI_PLATFORM: dict[str, str] = {v: k for k, v in PLATFORMS.items()}


@dataclass(frozen=True)
class ReleasePlatform:
    """What one torch release ships for one host architecture."""

    platform: str  # "x86_64" or "aarch64"
    python: tuple[str, ...]
    python_experimental: tuple[str, ...]
    #: Python versions whose wheels are on PyTorch's own index only (not on the default package index)
    python_index_only: tuple[str, ...]
    #: the variant a plain `pip install torch` gets from the default index ("cpu": a CPU build)
    default_cuda: str
    #: CUDA variants on PyTorch's index (and the default)
    variants: tuple[str, ...]
    variants_experimental: tuple[str, ...]
    source: str
    #: variants first published with a later patch of the series: {"12.9": "2.12.1"}
    variants_from: dict[str, str] = field(default_factory=dict)
    #: Pythons whose wheels stop with a patch of the series: {"3.13t": "2.12.0"} (later patches have none)
    python_until: dict[str, str] = field(default_factory=dict)

    def pythons(self, version: str | None = None) -> tuple[str, ...]:
        """The Pythons with wheels for this patch (``version``; None: any patch of the series)."""
        if version is None:
            return self.python
        return tuple(p for p in self.python
                     if p not in self.python_until or Version(version) <= Version(self.python_until[p]))


@dataclass(frozen=True)
class TorchRelease:
    series: str  # "2.5"
    patches: tuple[str, ...]
    python: tuple[str, ...]  # x86_64 (also in ``platforms``)
    python_experimental: tuple[str, ...]
    default_cuda: str
    variants: tuple[str, ...]
    variants_experimental: tuple[str, ...]
    torchvision: dict[str, str]
    source: str
    platforms: dict[str, ReleasePlatform] = field(default_factory=dict)
    #: patches known from the local overlay (``kiln knowledge update``), not the built-in rows: patch -> source
    learned: dict[str, str] = field(default_factory=dict)

    def on(self, platform: str) -> ReleasePlatform | None:
        """What this release ships for a host architecture ("x86_64", "aarch64"); None = nothing known."""
        return self.platforms.get(platform)


@dataclass(frozen=True)
class Companion:
    """Which release of a companion package (torchvision, torchaudio) goes with one torch release."""

    torch: str
    package: str
    #: the companion's version; "" = no release of it exists for this torch (``note`` says why)
    version: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class ArchRow:
    series: str
    cuda: str
    arch_list: str
    entries: tuple[ArchEntry, ...]
    source: str
    platform: str = "x86_64"


@dataclass(frozen=True)
class Gpu:
    name: str  # canonical (first) name
    capability: Capability
    family: str
    #: host CPU architectures the GPU is found with: "x86_64", "aarch64" (SBSA servers and Grace
    #: superchips) or "tegra" (Jetson modules, whose integrated GPU runs NVIDIA's L4T stack only).
    #: The first is the usual host, used when a spec does not name its platform.
    hosts: tuple[str, ...]
    source: str

    @property
    def tegra(self) -> bool:
        return "tegra" in self.hosts


@dataclass(frozen=True)
class Extension:
    name: str
    import_name: str
    min_capability: Capability
    torch: str
    min_cuda: str
    arch_env: str
    arch_format: str
    env: dict[str, str]
    no_build_isolation: bool
    distribution: str
    memory_per_job_gib: int
    notes: str
    source: str
    arch_min_cuda: dict[str, str] = field(default_factory=dict)
    pairs: dict[str, str] = field(default_factory=dict)
    git: str = ""  # the repository builds come from when the package is not on the index
    build_requires: tuple[str, ...] = ()  # what the build imports (installed beside torch, no isolation)
    build_cost: tuple[int, int] = (0, 0)  # rough CPU-minutes: (independent of archs, per arch)


@dataclass(frozen=True)
class Prebuilt:
    """Prebuilt wheels of an extension published outside the package index (e.g. release assets)."""

    name: str
    versions: tuple[str, ...]
    cuda_major: str
    torch: tuple[str, ...]  # torch X.Y series
    abi: dict[str, str]  # torch X.Y -> "TRUE" / "FALSE" (torch._C._GLIBCXX_USE_CXX11_ABI)
    python: tuple[str, ...]
    archs: str  # TORCH_CUDA_ARCH_LIST form of what the wheels were compiled for
    url: str  # template: {version} {cuda_major} {torch} {abi} {py}
    source: str


@dataclass(frozen=True)
class Toolchain:
    """CUDA compiler (and library) wheels for one CUDA major; ``{cuda}`` is torch's major.minor."""

    cuda_major: str
    compiler: tuple[str, ...]
    libraries: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class TorchSource:
    """How PyTorch itself is built from source."""

    git: str
    ref: str  # template: {version}
    build_requires: tuple[str, ...]
    env: dict[str, str]
    memory_per_job_gib: int
    build_cost: tuple[int, int]
    source: str


@dataclass(frozen=True)
class NgcRelease:
    ngc: str
    cuda: str
    torch: str
    python: str
    ubuntu: str
    constraints: bool
    source: str
    #: TORCH_CUDA_ARCH_LIST the release was built with, where NVIDIA's image says so ("" = not recorded)
    arch_list: str = ""
    #: the release notes page, and what it says about drivers and forward compatibility
    url: str = ""
    driver_note: str = ""


def _norm(name: str) -> str:
    n = name.lower()
    n = re.sub(r"^(nvidia\s+)?(tesla\s+|geforce\s+|quadro\s+)?", "", n.strip())
    return re.sub(r"[\s_-]+", "", n)


def free_threaded(python: str) -> bool:
    """``"3.13t"`` -> True: a free-threaded CPython build (PEP 703), whose wheels are tagged ``cp313t``."""
    return python.endswith("t")


def python_key(python: str) -> tuple[int, int, bool]:
    """``"3.13t"`` -> (3, 13, True): sortable, the free-threaded build after its GIL sibling."""
    major, minor = python.removesuffix("t").split(".")[:2]
    return int(major), int(minor), free_threaded(python)


def cuda_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class Knowledge:
    releases: tuple[TorchRelease, ...]
    arch_rows: tuple[ArchRow, ...]
    gpus: tuple[Gpu, ...]
    gpu_index: dict[str, Gpu]
    default_target_names: tuple[str, ...]
    family_floor: dict[str, tuple[str, str]]  # "12" -> (driver, source)
    toolkit_driver: dict[str, tuple[str, str]]  # "12.4" -> (driver, source)
    toolkit_targets: tuple[tuple[str, Capability, Capability, str], ...]
    extensions: dict[str, Extension]
    ngc: tuple[NgcRelease, ...]
    sources: dict[str, dict[str, str]]
    prebuilt: tuple[Prebuilt, ...] = ()
    toolchains: tuple[Toolchain, ...] = ()
    torch_source: TorchSource | None = None
    #: "12.0" -> ("12.8", source): the first toolkit that knows an architecture (cuda.toml ``added``)
    arch_first_cuda: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: torchvision / torchaudio per torch release (companions.toml, plus what the overlay learned)
    companions: tuple[Companion, ...] = ()
    #: the local overlay whose rows were added to the built-in ones ("" = built-in rows only)
    overlay: str = ""
    #: nvidia/cuda versions whose image tags NVIDIA deleted: "10.1" -> (the tag to use instead or "", source)
    deleted_cuda_tags: dict[str, tuple[str, str]] = field(default_factory=dict)

    def companion(self, package: str, torch: str) -> Companion | None:
        """The row pairing ``package`` with torch ``torch``; None when no row says anything about it."""
        return next((c for c in self.companions if c.package == package and c.torch == torch), None)

    # -- torch ----------------------------------------------------------------------------------
    def release_of(self, version: str) -> TorchRelease | None:
        v = Version(version)
        series = f"{v.major}.{v.minor}"
        for r in self.releases:
            if r.series == series:
                return r
        return None

    def all_patches(self) -> list[str]:
        """Every known torch version, newest first."""
        out = [p for r in self.releases for p in r.patches]
        return sorted(out, key=Version, reverse=True)

    def arch_row(self, series: str, cuda: str, platform: str = "x86_64") -> ArchRow | None:
        for row in self.arch_rows:
            if row.series == series and row.cuda == cuda and row.platform == platform:
                return row
        return None

    # -- GPUs -----------------------------------------------------------------------------------
    def lookup_gpu(self, name_or_cc: str) -> Capability:
        """A GPU name ("H100", "RTX 4090") or a capability ("9.0", "sm_90") -> Capability."""
        return self.lookup_gpu_entry(name_or_cc)[1]

    def lookup_gpu_entry(self, name_or_cc: str) -> tuple[str, Capability, Gpu | None]:
        text = name_or_cc.strip()
        try:
            cap = Capability.parse(text)
            known = next((g for g in self.gpus if g.capability == cap), None)
            if re.fullmatch(r"\d{1,2}\.\d|sm_\d{2,3}|compute_\d{2,3}", text.lower()):
                if known is None and cap not in {g.capability for g in self.gpus}:
                    valid = sorted({str(g.capability) for g in self.gpus}, key=lambda s: Capability.parse(s))
                    raise ResolveError(
                        f"compute capability {text} is not one NVIDIA has shipped.",
                        hint=f"Use one of: {', '.join(valid)}.",
                    )
                return text, cap, known
        except ValueError:
            pass
        gpu = self.gpu_index.get(_norm(text))
        if gpu is None:
            close = difflib.get_close_matches(_norm(text), list(self.gpu_index), n=3, cutoff=0.6)
            names = [self.gpu_index[c].name if _norm(self.gpu_index[c].name) == c else c for c in close]
            suggestion = f" Did you mean {' or '.join(repr(n) for n in names)}?" if names else ""
            raise ResolveError(
                f"unknown GPU {text!r}.{suggestion}",
                hint="Name a known GPU (`kiln explain --gpus` lists them) or give its compute capability, e.g. '8.6'.",
            )
        return text, gpu.capability, gpu

    @property
    def default_targets(self) -> tuple[Capability, ...]:
        return tuple(self.lookup_gpu(n) for n in self.default_target_names)

    # -- CUDA / drivers -------------------------------------------------------------------------
    def driver_floor(self, cuda: str) -> tuple[str, str]:
        """The oldest driver that runs code built with this CUDA (minor-version compatibility)."""
        major = cuda.split(".")[0]
        if major not in self.family_floor:
            raise ResolveError(f"no driver data for CUDA {cuda}.", hint="Choose a CUDA 11, 12 or 13 variant.")
        return self.family_floor[major]

    def gpu_driver_floor(self, capability: Capability) -> tuple[str, str, str] | None:
        """(driver, CUDA, source): the oldest driver that knows a GPU of this compute capability.

        A GPU runs only on drivers released after its architecture: the driver of the first CUDA
        toolkit that compiles for it (FEAT's ranges, CTK's drivers), e.g. 570.26 (CUDA 12.8) for
        Blackwell. None for architectures that no toolkit row lists as ``added`` (older than every
        driver a CUDA 11.7+ build needs).
        """
        first = self.arch_first_cuda.get(str(capability))
        if first is None or first[0] not in self.toolkit_driver:
            return None
        driver, driver_src = self.toolkit_driver[first[0]]
        return driver, first[0], f"{driver_src}; {first[1]}"

    def toolkit_max_target(self, cuda: str) -> tuple[Capability, Capability] | None:
        """(oldest, newest) capability this toolkit compiles for (the newest row not newer than cuda)."""
        best = None
        for c, lo, hi, _src in self.toolkit_targets:
            if cuda_key(c) <= cuda_key(cuda) and (best is None or cuda_key(c) > cuda_key(best[0])):
                best = (c, lo, hi)
        return None if best is None else (best[1], best[2])


def _platform(name: str, r: dict[str, Any], source: str) -> ReleasePlatform:
    return ReleasePlatform(
        platform=name,
        python=tuple(r["python"]),
        python_experimental=tuple(r.get("python_experimental", ())),
        python_index_only=tuple(r.get("python_index_only", ())),
        default_cuda=r["default_cuda"],
        variants=tuple(r["variants"]),
        variants_experimental=tuple(r.get("variants_experimental", ())),
        source=r.get("source", source),
        variants_from=dict(r.get("variants_from", {})),
        python_until=dict(r.get("python_until", {})),
    )


def _release(r: dict[str, Any]) -> TorchRelease:
    """A ``[[release]]`` row: its top-level keys describe x86_64, an ``aarch64`` table the Arm wheels."""
    x86 = _platform("x86_64", r, r["source"])
    platforms = {"x86_64": x86}
    if "aarch64" in r:
        platforms["aarch64"] = _platform("aarch64", r["aarch64"], r["source"])
    return TorchRelease(
        series=r["series"], patches=tuple(r["patches"]), python=x86.python,
        python_experimental=x86.python_experimental, default_cuda=x86.default_cuda, variants=x86.variants,
        variants_experimental=x86.variants_experimental, torchvision=dict(r.get("torchvision", {})),
        source=r["source"], platforms=platforms,
    )


def _cost(row: dict[str, int] | None) -> tuple[int, int]:
    return (0, 0) if row is None else (int(row.get("base", 0)), int(row.get("per_arch", 0)))


def _load(name: str) -> dict[str, Any]:
    text = resources.files("torchkiln.knowledge").joinpath(name).read_text(encoding="utf-8")
    return tomllib.loads(text)


@cache
def load_knowledge() -> Knowledge:
    """Load the packaged knowledge base (cached: the data never changes at run time)."""
    t = _load("torch.toml")
    releases = tuple(_release(r) for r in t["release"])
    arch_rows = tuple(
        ArchRow(series=s, cuda=a["cuda"], arch_list=a["arch_list"], entries=parse_arch_list(a["arch_list"]),
                source=a["source"], platform=a.get("platform", "x86_64"))
        for a in t["arch"]
        for s in a["series"]
    )
    g = _load("gpus.toml")
    gpus: list[Gpu] = []
    index: dict[str, Gpu] = {}
    for row in g["gpu"]:
        cap = Capability.parse(row["capability"])
        canonical = row["names"][0]
        hosts = tuple(row.get("hosts", ("x86_64", "aarch64")))
        for name in row["names"]:
            gpu = Gpu(name=name, capability=cap, family=row["family"], hosts=hosts, source=row["source"])
            gpus.append(gpu)
            index[_norm(name)] = gpu
        del canonical
    c = _load("cuda.toml")
    e = _load("extensions.toml")
    extensions = {
        x["name"]: Extension(
            name=x["name"], import_name=x["import"], min_capability=Capability.parse(x["min_capability"]),
            torch=x["torch"], min_cuda=x["min_cuda"], arch_env=x["arch_env"], arch_format=x["arch_format"],
            env=dict(x.get("env", {})), no_build_isolation=x["no_build_isolation"],
            distribution=x["distribution"], memory_per_job_gib=x["memory_per_job_gib"], notes=x["notes"],
            source=x["source"], arch_min_cuda=dict(x.get("arch_min_cuda", {})), pairs=dict(x.get("pairs", {})),
            git=x.get("git", ""), build_requires=tuple(x.get("build_requires", ())),
            build_cost=_cost(x.get("build_cost")),
        )
        for x in e["extension"]
    }
    prebuilt = tuple(
        Prebuilt(name=r["name"], versions=tuple(r["versions"]), cuda_major=r["cuda_major"], torch=tuple(r["torch"]),
                 abi=dict(r["abi"]), python=tuple(r["python"]), archs=r["archs"], url=r["url"], source=r["source"])
        for r in e.get("prebuilt", [])
    )
    toolchains = tuple(
        Toolchain(cuda_major=r["cuda_major"], compiler=tuple(r["compiler"]), libraries=tuple(r["libraries"]),
                  source=r["source"])
        for r in e.get("toolchain", [])
    )
    torch_source = next(
        (TorchSource(git=r["git"], ref=r["ref"], build_requires=tuple(r["build_requires"]), env=dict(r["env"]),
                     memory_per_job_gib=r["memory_per_job_gib"], build_cost=_cost(r.get("build_cost")),
                     source=r["source"])
         for r in e.get("torch_source", [])),
        None,
    )
    companions = tuple(
        Companion(torch=r["torch"], package=pkg, version=r[pkg], source=r["source"], note=r.get(f"{pkg}_note", ""))
        for r in _load("companions.toml")["pair"]
        for pkg in ("torchvision", "torchaudio")
        if pkg in r
    )
    n = _load("ngc.toml")
    ngc = tuple(
        NgcRelease(ngc=r["ngc"], cuda=r["cuda"], torch=r["torch"], python=r["python"], ubuntu=r.get("ubuntu", ""),
                   constraints=r.get("constraints", False), source=r["source"], arch_list=r.get("arch_list", ""),
                   url=r.get("url", ""), driver_note=r.get("driver_note", ""))
        for r in n["release"]
    )
    return Knowledge(
        releases=releases,
        arch_rows=arch_rows,
        gpus=tuple(gpus),
        gpu_index=index,
        default_target_names=tuple(g["defaults"]["targets"]),
        family_floor={k: (v["floor"], v["source"]) for k, v in c["family"].items()},
        toolkit_driver={r["cuda"]: (r["toolkit_driver"], r["source"]) for r in c["toolkit"]},
        toolkit_targets=tuple(
            (r["cuda"], Capability.parse(r["min"]), Capability.parse(r["max"]), r["source"]) for r in c["targets"]
        ),
        arch_first_cuda={
            str(Capability.parse(a)): (r["cuda"], r["source"]) for r in c["targets"] for a in r.get("added", ())
        },
        extensions=extensions,
        ngc=ngc,
        sources=_load("sources.toml"),
        prebuilt=prebuilt,
        toolchains=toolchains,
        torch_source=torch_source,
        companions=companions,
        deleted_cuda_tags={
            v: (r.get("use", {}).get(".".join(v.split(".")[:2]), ""), r["source"])
            for r in c.get("deleted_tags", []) for v in r["versions"]
        },
    )
