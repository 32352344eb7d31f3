"""The BuildPlan: the full, pinned decision the resolver makes. Everything downstream reads only this.

Frozen dataclasses holding tuples (never lists or dicts) so that a plan is hashable and rendering
it is deterministic.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class TargetPlan:
    name: str
    capability: str
    family: str
    covered: bool
    how: str  # e.g. "SASS sm_90", "PTX compute_90 (JIT by the driver)", "no kernel image"


@dataclass(frozen=True)
class ToolchainPlan:
    """The CUDA compiler of the builder stages (never of the runtime)."""

    kind: Literal["wheels", "image"]  # NVIDIA's CUDA wheels from the package index, or the base image's own
    cuda: str  # the toolkit's major.minor: always torch's
    compiler: tuple[str, ...]  # requirements installed for kind "wheels" (empty for "image")
    libraries: tuple[str, ...]  # what a torch source build links against (kind "wheels")
    cuda_home: str  # "/usr/local/cuda"
    apt: tuple[str, ...]  # host compiler and tools of the builder stages
    source: str
    image: str = ""  # the builder stages' own base (the devel sibling of an nvidia/cuda runtime base); "" = base


@dataclass(frozen=True)
class TorchBuildPlan:
    """PyTorch compiled from source in a builder stage (``[torch] source = "git"``)."""

    git: str
    ref: str
    version: str  # PYTORCH_BUILD_VERSION, e.g. "2.5.1+cu126"
    env: tuple[tuple[str, str], ...]  # sorted build variables (USE_*, BUILD_TEST, CMAKE_*, TORCH_NVCC_FLAGS)
    build_requires: tuple[str, ...]
    memory_per_job_gib: int
    source: str


@dataclass(frozen=True)
class ImageTorchPlan:
    """torch as the base image brings it (``[torch] source = "image"``): what kiln read from the image."""

    python_exe: str  # "/usr/bin/python3.12": the interpreter torch is installed for
    site: str  # "/usr/local/lib/python3.12/dist-packages"
    #: the image's own constraints file ("/etc/pip/constraint.txt"), honoured by every install; "" = none
    constraints: str
    #: the image's CUDA toolkit home when it has nvcc of torch's CUDA ("/usr/local/cuda"), else ""
    cuda_home: str
    nvcc_cuda: str  # the image's nvcc release ("13.1"), "" = no nvcc
    ngc: str  # NGC release ("25.12"), "" for other images
    #: "image <id>" when the facts were read from the image, else the knowledge row they came from
    facts: str
    #: the image is already a development image (nvcc, headers): no slim runtime stage is made from it
    devel: bool


@dataclass(frozen=True)
class TorchPlan:
    version: str  # "2.5.1"
    variant: str  # "cu124" or "cpu"
    cuda: str | None  # "12.4", None for CPU
    requirement: str  # "torch==2.5.1" or "torch==2.5.1+cu121"
    on_default_index: bool  # False: the variant lives on a torch index (sources.torch_index)
    wheel_arch_list: str  # the arch list the official wheels were compiled for ("" for CPU)
    wheel_arch_source: str
    companions: tuple[str, ...]  # pinned requirements, e.g. ("torchvision==0.20.1",)
    build: TorchBuildPlan | None = None  # set when torch is compiled from source
    image: ImageTorchPlan | None = None  # set when torch is the base image's own


@dataclass(frozen=True)
class ExtensionPlan:
    name: str
    requirement: str | None  # "flash-attn==2.7.4.post1"; None for a local path
    path: str | None  # a source tree inside the build context
    import_name: str
    env: tuple[tuple[str, str], ...]  # build variables (sorted)
    no_build_isolation: bool
    memory_per_job_gib: int
    notes: str
    source: str
    version: str | None = None
    git: str | None = None  # repository (with ``ref``) for packages built from git
    ref: str | None = None
    build: Literal["source", "prebuilt"] = "source"
    prebuilt: str | None = None  # the requirement or URL of the exactly matching prebuilt wheel
    build_requires: tuple[str, ...] = ()  # installed beside torch before a build without isolation

    @property
    def spec(self) -> str:
        """What pip builds: a requirement, a git URL or (for a local tree) the path."""
        if self.path is not None:
            return self.path
        if self.git is not None:
            return f"{self.name} @ git+{self.git}@{self.ref}" if self.ref else f"{self.name} @ git+{self.git}"
        return self.requirement or self.name


@dataclass(frozen=True)
class HealthcheckPlan:
    command: tuple[str, ...]
    interval: str
    timeout: str
    start_period: str
    retries: int


@dataclass(frozen=True)
class AppPlan:
    copy: tuple[str, ...]
    workdir: str
    command: tuple[str, ...]
    user: str
    env: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...] = ()
    expose: tuple[int, ...] = ()
    healthcheck: HealthcheckPlan | None = None


@dataclass(frozen=True)
class StepPlan:
    """A ``[[steps]]`` entry: the user's own commands at a named point, rendered verbatim."""

    index: int  # 1-based, in spec order
    after: Literal["system", "torch", "packages", "app"]
    name: str
    commands: tuple[str, ...]
    cache: tuple[str, ...]
    secrets: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @property
    def title(self) -> str:
        return f"step {self.index} (after {self.after})" + (f": {self.name}" if self.name else "")


@dataclass(frozen=True)
class SourcesPlan:
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    torch_index: str | None
    network: Literal["default", "host"]
    #: the PyTorch index the project takes torch from ([tool.uv.sources], a requirements file): the build's
    #: torch index when no flag, variable, [sources] entry or wheel folder names any package source
    project_torch_index: str | None = None


@dataclass(frozen=True)
class Decision:
    topic: str
    choice: str
    why: str
    source: str = ""


@dataclass(frozen=True)
class LockPins:
    """What ``kiln build --locked`` installs: the lock's hashed pins (``name==v --hash=sha256:…`` lines)."""

    torch: tuple[str, ...]
    packages: tuple[str, ...]
    base_id: str  # the base image's id in the lock (checked before a build FROM a local-only base)
    lock: str  # the lock file's path


@dataclass(frozen=True)
class PrunePlan:
    """Fat binaries cut down to the targets in the steps that install them (``kiln prune``; issue #28)."""

    #: compute capabilities kept ("9.0")
    targets: tuple[str, ...]
    #: also keep the newest PTX that runs on a target ([gpu] ptx)
    ptx: bool
    #: what is pruned: "torch" (torch's own libraries), "extension-libraries" (the files the image's extensions install)
    what: tuple[str, ...]

    @property
    def args(self) -> str:
        """The command-line arguments of prune.py for these targets."""
        return f"--targets {','.join(self.targets)}" + (" --ptx" if self.ptx else "")


@dataclass(frozen=True)
class ProjectPlan:
    """``[project]``: the project's dependencies (its lock's or requirements' lines) and its own package."""

    root: str  # the project's folder, relative to the spec's ("." or a monorepo's "services/trainer")
    name: str  # canonical project name ("" when it has none)
    source: str  # where the dependencies come from: "uv.lock", "requirements", "pyproject", "none"
    files: tuple[str, ...]  # the project files read (relative to the spec's folder)
    #: dependency lines as uv reads them (hashes and markers kept), in install order; torch's closure excluded
    requirements: tuple[str, ...]
    names: tuple[str, ...]  # the canonical name of each requirement line
    #: from a lock that pins torch: torch and everything it needs, hashed (the torch layer installs these)
    torch_requirements: tuple[str, ...]
    constraints: tuple[str, ...]  # the -c lines of the requirements files
    hashed: bool  # every line carries hashes: installs run with --require-hashes
    package: bool  # the project is a package: built into a wheel, installed in a layer of its own
    compiled: bool  # its build compiles against torch (a C++/CUDA extension in the tree)
    build_requires: tuple[str, ...]
    scm_version: bool  # its version comes from git, which a build context lacks: a version is given
    wheel_deps: bool  # its dependencies are known only from its wheel (setup.py): the project layer resolves them
    entries: tuple[str, ...]  # the project's top-level files and folders the build context carries
    torch_from: str  # where the project pins torch ("" = torch is torchkiln's choice)
    #: other local packages it depends on (uv workspace members, path requirements): (folder relative to the
    #: spec's folder, its top-level entries); each is built into a wheel beside the project's
    locals: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class BuildPlan:
    image_name: str
    tag: str
    python: str  # "3.11"
    python_exe: str  # "python3.11"
    python_source: Literal["image", "apt"]
    base_image: str
    torch: TorchPlan
    targets: tuple[TargetPlan, ...]
    arch_list: str  # TORCH_CUDA_ARCH_LIST for everything compiled in the image ("" for CPU)
    min_driver: str | None  # the oldest driver the image runs on (None for CPU)
    min_driver_source: str
    nvidia_require_cuda: str | None
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]
    extensions: tuple[ExtensionPlan, ...]
    app: AppPlan
    sources: SourcesPlan
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...]
    toolchain: ToolchainPlan | None = None  # set when something is compiled in the build
    #: the compiler of the dev stage: ``toolchain`` when set, else torch's CUDA compiler for CUDA plans
    #: (None for CPU plans, and where no compiler of torch's CUDA exists for the base)
    dev_toolchain: ToolchainPlan | None = None
    #: bytecode of the torch layer: "imports" (what importing these modules loads) or "all" files
    bytecode: Literal["imports", "all"] = "imports"
    #: modules imported at build time for their bytecode: torch, its companions, [python] precompile
    precompile: tuple[str, ...] = ("torch",)
    #: the OCI platform of the image: "linux/amd64" or "linux/arm64" (Grace superchips, Arm servers)
    platform: str = "linux/amd64"
    #: set by ``kiln build --locked`` (``torchkiln.building.locking.locked_plan``): install exactly these pins
    locked: LockPins | None = None
    #: a Python uv installs into the base stage ("3.13t": a free-threaded CPython no base image provides), or ""
    python_install: str = ""
    #: [gpu] forward_compat: the NVIDIA image whose cuda-compat libraries the runtime carries, or ""
    cuda_compat: str = ""
    #: torch's and the extensions' fat binaries pruned to the targets (None: kept whole)
    prune: PrunePlan | None = None
    #: ``[[steps]]``: the user's own commands, in spec order (rendered at their points, linted by ``load_plan``)
    steps: tuple[StepPlan, ...] = ()

    def steps_after(self, point: str) -> tuple[StepPlan, ...]:
        return tuple(s for s in self.steps if s.after == point)
    #: ``[project]``: the project's dependencies and its own package (``torchkiln.resolve.project``)
    project: ProjectPlan | None = None

    @property
    def image_ref(self) -> str:
        return f"{self.image_name}:{self.tag}"

    @property
    def cuda(self) -> str | None:
        return self.torch.cuda

    @property
    def venv(self) -> str:
        return "/opt/venv"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `kiln resolve --json` (stable keys; see the README)."""
        d = asdict(self)
        return {
            "image": self.image_ref,
            "platform": self.platform,
            "torch": self.torch.version,
            "torch_requirement": self.torch.requirement,
            "variant": self.torch.variant,
            "cuda": self.torch.cuda,
            "python": self.python,
            "python_install": self.python_install,
            "cuda_compat": self.cuda_compat,
            "base_image": self.base_image,
            "arch_list": self.arch_list,
            "wheel_arch_list": self.torch.wheel_arch_list,
            "targets": [asdict(t) for t in self.targets],
            "min_driver": self.min_driver,
            "nvidia_require_cuda": self.nvidia_require_cuda,
            "companions": list(self.torch.companions),
            "bytecode": self.bytecode,
            "precompile": list(self.precompile),
            "pip_packages": list(self.pip_packages),
            "apt_packages": list(self.apt_packages),
            "extensions": d["extensions"],
            "toolchain": d["toolchain"],
            "dev_toolchain": d["dev_toolchain"],
            "torch_build": d["torch"]["build"],
            "torch_image": d["torch"]["image"],
            "app": d["app"],
            "sources": d["sources"],
            "decisions": d["decisions"],
            "warnings": list(self.warnings),
            "prune": d["prune"],
            "steps": [asdict(s) for s in self.steps],
            "project": d["project"],
        }
