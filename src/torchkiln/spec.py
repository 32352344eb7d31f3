"""The user's intent: ``kiln.toml`` parsed into strict pydantic models.

The spec holds no derived facts (those are the resolver's job). Every table forbids unknown keys;
``load_spec`` turns pydantic's errors into one ``SpecError`` that names the file, the table and the
key, and suggests the closest valid key.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package (a dependency there)
    import tomli as tomllib

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from torchkiln.errors import SpecError
from torchkiln.redact import has_credential, redact

_IMAGE_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_REGISTRY_PREFIX = re.compile(r"^[A-Za-z0-9.-]+(?::\d+)?/")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_CUDA = re.compile(r"^(auto|cpu|\d{2}\.\d)$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GIT_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]{0,127}$")
_DURATION = re.compile(r"(\d+(ms|s|m|h))+")
_MOUNT_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
_GIT_URL = re.compile(r"^(https?|ssh|git|file)://\S+$|^git@[^\s:]+:\S+$")


def _git_url(v: str | None) -> str | None:
    if v is not None and not _GIT_URL.match(v):
        raise ValueError("must be a git repository URL such as 'https://example.org/org/repo' (or git@host:org/repo)")
    return v


def _git_ref(v: str | None) -> str | None:
    if v is not None and (not _GIT_REF.match(v) or ".." in v):
        raise ValueError("must be a git tag, branch or commit such as 'v2.5.1' or a 40-digit commit id")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class ImageSpec(_Strict):
    name: str
    tag: str = "latest"
    platform: Literal["linux/amd64", "linux/arm64"] | None = Field(
        default=None,
        description=(
            "the image's OCI platform; unset = inferred from [gpu] targets (Grace superchips such as GH200, "
            "GB200, GB300 and GB10 need linux/arm64), else linux/amd64"
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        rest = v
        m = _REGISTRY_PREFIX.match(v)
        if m and ("." in m.group(0) or ":" in m.group(0) or m.group(0) == "localhost/"):
            rest = v[m.end() :]
        if not _IMAGE_NAME.match(rest):
            raise ValueError(
                "must be a lowercase image name such as 'acme/trainer' (letters, digits, '.', '_', '-', '/')"
            )
        return v

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not _TAG.match(v):
            raise ValueError("must be a tag such as 'latest' or '2024.06' (letters, digits, '_', '.', '-')")
        return v


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class PythonSpec(_Strict):
    version: str = "3.11"
    precompile: list[str] | Literal["all"] = Field(
        default_factory=list,
        description=(
            "bytecode of the torch layer: by default only for the modules `import torch` (and its companions) "
            "loads; list more modules to import at build time (e.g. 'torch._inductor.compile_fx' for "
            "torch.compile), or 'all' to compile every file"
        ),
    )

    @field_validator("precompile")
    @classmethod
    def _precompile(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, list):
            bad = [m for m in v if not _MODULE.fullmatch(m)]
            if bad:
                raise ValueError(f"not a module name: {', '.join(map(repr, bad))} (write e.g. 'torch._dynamo')")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        m = re.fullmatch(r"3\.(\d{1,2})(t?)", v)
        if m is None:
            raise ValueError("must be a Python minor version such as '3.11' (or '3.13t', '3.14t' for the "
                             "free-threaded build)")
        if m.group(2) and int(m.group(1)) < 13:
            raise ValueError(f"free-threaded CPython builds start with 3.13 (PEP 703): there is no {v}; use "
                             "'3.13t' or '3.14t'")
        return v


class TorchSpec(_Strict):
    version: str = Field(default="", description="exact version or a PEP 440 specifier; empty = newest known")
    cuda: str = "auto"
    packages: list[str] = Field(default_factory=list)
    source: Literal["wheel", "git", "image"] = Field(
        default="wheel",
        description=(
            "'wheel': the official wheels; 'git': compile torch from its repository; 'image': the torch the "
            "[base] image brings (NGC PyTorch and the like), read from the image and never replaced"
        ),
    )
    git: str | None = Field(default=None, description="repository to build from (source = 'git'); default: upstream")
    ref: str | None = Field(default=None, description="tag or commit to build (source = 'git'); default: v<version>")

    @field_validator("git")
    @classmethod
    def _git(cls, v: str | None) -> str | None:
        return _git_url(v)

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        return _git_ref(v)

    @model_validator(mode="after")
    def _source(self) -> TorchSpec:
        if self.source == "image":
            if self.git is not None or self.ref is not None:
                raise ValueError("'git' and 'ref' apply only with source = \"git\"; source = \"image\" uses the "
                                 "base image's torch as it is")
            if self.packages:
                raise ValueError("source = \"image\" keeps the base image's torch and its companions as they are: "
                                 "remove [torch] packages (torchvision/torchaudio come with the image, or not at all)")
            return self
        if self.source == "wheel":
            if self.git is not None or self.ref is not None:
                raise ValueError("'git' and 'ref' apply only with source = \"git\" (building torch from source)")
            return self
        try:
            Version(self.version)
        except InvalidVersion:
            raise ValueError(
                "source = \"git\" builds one pinned release: set version to an exact release such as '2.5.1'"
            ) from None
        if self.cuda in ("auto", "cpu"):
            raise ValueError(
                "source = \"git\" needs the CUDA toolkit to build with: set cuda to a version such as '12.6'"
            )
        return self

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not v:
            return v
        try:
            Version(v)
            return v
        except InvalidVersion:
            pass
        try:
            SpecifierSet(v)
        except InvalidSpecifier:
            raise ValueError("must be an exact version ('2.5.1') or a PEP 440 specifier ('>=2.6,<2.8')") from None
        return v

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, v: str) -> str:
        v = v.lower().removeprefix("cu") if v.lower().startswith("cu1") else v.lower()
        if re.fullmatch(r"\d{3}", v):  # "124" -> "12.4"
            v = f"{v[:2]}.{v[2]}"
        if not _CUDA.match(v):
            raise ValueError("must be a CUDA variant such as '12.4' (or 'cu124'), 'auto' or 'cpu'")
        return v

    @field_validator("packages")
    @classmethod
    def _packages(cls, v: list[str]) -> list[str]:
        allowed = {"torchvision", "torchaudio"}
        for p in v:
            if p not in allowed:
                raise ValueError(
                    f"unknown companion {p!r}: torch.packages takes {sorted(allowed)}; "
                    "other packages go in [packages] pip"
                )
        return v


class GpuSpec(_Strict):
    targets: list[str] = Field(default_factory=list)
    min_driver: str | None = None
    ptx: bool = True
    forward_compat: bool = Field(
        default=False,
        description=(
            "CUDA forward compatibility: carry NVIDIA's cuda-compat libraries so a newer CUDA runs on an older "
            "driver branch (data-center GPUs only); used at container start only when the host driver is older"
        ),
    )
    #: with targets given: cut torch's and the extensions' fat binaries down to them (kiln prune, #28)
    prune: bool = True

    @field_validator("min_driver")
    @classmethod
    def _driver(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d{3}(\.\d{1,3}){0,2}", v):
            raise ValueError("must be an NVIDIA driver version such as '535.104' or '580.65.06'")
        return v


class PackagesSpec(_Strict):
    pip: list[str] = Field(default_factory=list)
    apt: list[str] = Field(default_factory=list)

    @field_validator("pip")
    @classmethod
    def _pip(cls, v: list[str]) -> list[str]:
        from packaging.requirements import InvalidRequirement, Requirement

        for item in v:
            if item.startswith((".", "/", "file:", "~")) or (
                    "@" not in item and item.endswith(("/", ".whl", ".tar.gz", ".zip"))):
                raise ValueError(
                    f"{item!r} is a local path, not a package requirement: a project's own package goes in "
                    f'[project] (path = "{item.removeprefix("file:").rstrip("/") or "."}"), which reads its '
                    "dependencies and installs it as a wheel in a layer of its own; a folder that compiles against "
                    "torch can also be an [[extensions]] entry with path"
                )
            try:
                req = Requirement(item)
            except InvalidRequirement as e:
                raise ValueError(f"{item!r} is not a valid requirement: {e}") from None
            if req.name.lower() in {"torch", "torchvision", "torchaudio"}:
                raise ValueError(
                    f"{req.name} is managed by torchkiln: set [torch] version / packages instead of listing it here"
                )
        return v

    @field_validator("apt")
    @classmethod
    def _apt(cls, v: list[str]) -> list[str]:
        for item in v:
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?", item):
                raise ValueError(f"{item!r} is not a Debian package name (optionally 'name=version')")
        return v


class ExtensionSpec(_Strict):
    name: str
    version: str | None = None
    path: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    git: str | None = None
    ref: str | None = None
    prebuilt: bool = Field(default=True, description="use a prebuilt wheel when one matches exactly")

    @field_validator("git")
    @classmethod
    def _git(cls, v: str | None) -> str | None:
        return _git_url(v)

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        return _git_ref(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", v):
            raise ValueError("must be a package name such as 'flash-attn' (letters, digits, '.', '_', '-')")
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("/") or ".." in Path(v).parts or not v.strip("./")):
            raise ValueError(f"{v!r} must be a folder inside the spec's folder (relative, no '..')")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not _ENV_NAME.match(k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _check(self) -> ExtensionSpec:
        given = [k for k in ("version", "path", "git") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(
                "give one of 'version' (a released package), 'path' (a local source tree) or 'git' "
                f"(a repository), not {' and '.join(repr(g) for g in given)}"
            )
        if self.ref is not None and self.path is not None:
            raise ValueError("'ref' names a git tag or commit; a local 'path' has none")
        return self


class HealthcheckSpec(_Strict):
    """``[app.healthcheck]``: a command the engine runs in the container to tell healthy from not."""

    command: list[str] = Field(min_length=1, description="exec form, e.g. [\"curl\", \"-f\", \"http://localhost:8000/\"]")
    interval: str = "30s"
    timeout: str = "30s"
    start_period: str = "0s"
    retries: int = Field(default=3, ge=1, le=100)

    @field_validator("interval", "timeout", "start_period")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.fullmatch(v):
            raise ValueError("must be a duration such as '30s', '5m' or '1m30s'")
        return v


class AppSpec(_Strict):
    copy_: list[str] = Field(default_factory=list, alias="copy")
    workdir: str = "/workspace"
    command: list[str] = Field(default_factory=list)
    entrypoint: list[str] = Field(default_factory=list, description="runs with command as its arguments")
    user: str = "kiln"
    env: dict[str, str] = Field(default_factory=dict)
    expose: list[int] = Field(default_factory=list, description="ports the app listens on (EXPOSE)")
    healthcheck: HealthcheckSpec | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("expose")
    @classmethod
    def _expose(cls, v: list[int]) -> list[int]:
        for port in v:
            if not 1 <= port <= 65535:
                raise ValueError(f"{port} is not a port (1-65535)")
        return sorted(set(v))

    @field_validator("copy_")
    @classmethod
    def _copy(cls, v: list[str]) -> list[str]:
        for p in v:
            if p.startswith("/") or ".." in Path(p).parts:
                raise ValueError(f"{p!r} must be a path inside the spec's folder (relative, no '..')")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path such as '/workspace'")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not _USER.match(v):
            raise ValueError("must be a Linux user name such as 'kiln' ('root' to run as root)")
        return v


#: where a ``[[steps]]`` entry runs: after the system (apt) packages, torch, the pip packages, or the app
STEP_POINTS = ("system", "torch", "packages", "app")


class StepSpec(_Strict):
    """``[[steps]]``: a command of the user's own at a named point of the build (rendered verbatim, linted)."""

    after: Literal["system", "torch", "packages", "app"] = Field(
        description="'system': after [packages] apt; 'torch': after torch; 'packages': after [packages] pip; "
                    "'app': after the app files are copied (as root; the runtime user is restored after it)")
    run: str | list[str] = Field(description="shell commands: a string (one command per line) or a list")
    name: str = ""
    cache: list[str] = Field(default_factory=list, description="folders kept as build cache mounts, never in a layer")
    secrets: list[str] = Field(default_factory=list,
                               description="build secrets: each an environment variable read at build time, "
                                           "mounted at /run/secrets/NAME for this step only")
    env: dict[str, str] = Field(default_factory=dict, description="variables of this step only")

    @field_validator("run")
    @classmethod
    def _run(cls, v: str | list[str]) -> str | list[str]:
        if not step_commands(v):
            raise ValueError("names no command: give the shell command(s) to run")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if "\n" in v or "\r" in v:
            raise ValueError("must be one line")
        return v

    @field_validator("cache")
    @classmethod
    def _cache(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/") or not _MOUNT_PATH.fullmatch(p):
                raise ValueError(f"{p!r} must be an absolute folder such as '/root/.cache/huggingface' "
                                 "(letters, digits, '._-/' only)")
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (the secret's value is read "
                                 "from that variable when the image is built)")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, value in v.items():
            if not _ENV_NAME.match(k):
                raise ValueError(f"{k!r} is not an environment variable name")
            if "\n" in value or "\r" in value:
                raise ValueError(f"the value of {k} holds a line break")
        return v


def step_commands(run: str | list[str]) -> list[str]:
    """The commands of a step's ``run``: a list as it is; a string split into lines, a line ending in a
    backslash joined with the next (as in a Dockerfile), blank lines and ``#`` comment lines dropped."""
    if isinstance(run, list):
        return [c.strip() for c in run if c.strip()]
    out: list[str] = []
    pending = ""
    for raw in run.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    if pending.strip():
        out.append(pending.strip())
    return [c for c in out if c]


class ProjectSpec(_Strict):
    """``[project]``: a Python project (pyproject.toml, uv.lock, requirements) as input (docs/project.md)."""

    path: str = Field(default=".", description="the project's folder, relative to the spec's (a monorepo's subfolder)")
    extras: list[str] = Field(default_factory=list, description="optional-dependencies to install (PEP 621 extras)")
    groups: list[str] = Field(default_factory=list, description="dependency groups to install (PEP 735)")
    requirements: list[str] = Field(
        default_factory=list,
        description="requirements files to install, relative to the project (default: requirements.txt when present; "
                    "a uv.lock wins)")
    script: str | None = Field(
        default=None,
        description="a single-file script with PEP 723 inline metadata (# /// script): its dependencies are the "
                    "project's, and it is the default command")

    @field_validator("script")
    @classmethod
    def _script(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("/") or ".." in Path(v).parts or not v.endswith(".py")):
            raise ValueError(f"{v!r} must be a .py file inside the project's folder (relative, no '..')")
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if v.startswith("/") or ".." in Path(v).parts:
            raise ValueError(f"{v!r} must be a folder inside the spec's folder (relative, no '..')")
        return v or "."

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, v: list[str]) -> list[str]:
        for p in v:
            if p.startswith("/") or ".." in Path(p).parts:
                raise ValueError(f"{p!r} must be a file inside the project's folder (relative, no '..')")
        return v

    @field_validator("extras", "groups")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
                raise ValueError(f"{name!r} is not an extra or group name (letters, digits, '.', '_', '-')")
        return v


class BaseSpec(_Strict):
    image: str = ""
    python: Literal["image", "apt"] = "image"


class SourcesSpec(_Strict):
    """Where packages come from at build time. Never baked into the image."""

    index_url: str | None = None
    extra_index_urls: list[str] = Field(default_factory=list)
    find_links: list[str] = Field(default_factory=list)
    torch_index: str | None = None
    network: Literal["default", "host"] = "default"


#: the axes of ``[matrix]``, in the order cells and tags list them (see ``torchkiln.matrix``)
AXES = ("torch", "cuda", "python", "platform", "gpu", "pip")
_PLATFORMS = ("linux/amd64", "linux/arm64")


def _axis_error(e: ValidationError) -> str:
    return str(e.errors()[0]["msg"]).removeprefix("Value error, ")


def _check_axis_value(axis: str, value: Any) -> Any:
    """One axis value, checked by the field it overrides (the same rules as that field)."""
    try:
        if axis == "torch":
            TorchSpec.model_validate({"version": value})
        elif axis == "cuda":
            return TorchSpec.model_validate({"cuda": value}).cuda
        elif axis == "python":
            PythonSpec.model_validate({"version": value})
        elif axis == "platform":
            ImageSpec.model_validate({"name": "a", "platform": value})
        elif axis == "gpu":
            if not value:
                raise ValueError("a GPU target set needs at least one GPU name or compute capability")
            GpuSpec.model_validate({"targets": value})
        elif axis == "pip":
            PackagesSpec.model_validate({"pip": value})
    except ValidationError as e:
        raise ValueError(f"{axis} = {_show(value)}: {_axis_error(e)}") from None
    return value


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, list) else "[" + ", ".join(map(repr, value)) + "]"


class MatrixEntry(_Strict):
    """One ``include`` or ``exclude`` entry of ``[matrix]``: axis keys with one value each."""

    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    platform: str | None = None
    gpu: list[str] | None = None
    pip: list[str] | None = None

    @model_validator(mode="after")
    def _values(self) -> MatrixEntry:
        given = {k: getattr(self, k) for k in AXES if getattr(self, k) is not None}
        if not given:
            raise ValueError(f"an entry needs at least one of {', '.join(AXES)}")
        for axis, value in given.items():
            object.__setattr__(self, axis, _check_axis_value(axis, value))
        return self


class MatrixSpec(_Strict):
    """``[matrix]``: axes of values (the cartesian product), ``exclude`` and ``include`` (GitHub Actions' rules)."""

    torch: list[str] = Field(default_factory=list, description="[torch] version of each cell")
    cuda: list[str] = Field(default_factory=list, description="[torch] cuda of each cell")
    python: list[str] = Field(default_factory=list, description="[python] version of each cell")
    platform: list[str] = Field(default_factory=list, description="[image] platform of each cell")
    gpu: list[list[str]] = Field(default_factory=list, description="[gpu] targets of each cell (a list per cell)")
    pip: list[list[str]] = Field(default_factory=list, description="pip packages added to [packages] pip")
    exclude: list[MatrixEntry] = Field(default_factory=list)
    include: list[MatrixEntry] = Field(default_factory=list)

    _order: tuple[str, ...] = PrivateAttr(default=())

    @property
    def axis_order(self) -> tuple[str, ...]:
        """The axes in the order kiln.toml writes them (the first varies slowest, as in GitHub Actions)."""
        return self._order + tuple(k for k in AXES if k not in self._order)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict):
            model._order = tuple(k for k in data if k in AXES)
        elif isinstance(data, MatrixSpec):
            model._order = data._order
        return model

    @model_validator(mode="after")
    def _axes(self) -> MatrixSpec:
        for axis in AXES:
            values = getattr(self, axis)
            if axis in self.model_fields_set and not values:
                raise ValueError(f"the axis '{axis}' lists no value: give at least one, or remove the key")
            checked = [_check_axis_value(axis, v) for v in values]
            shown = [tuple(v) if isinstance(v, list) else v for v in checked]
            dupes = sorted({_show(v) for i, v in enumerate(checked) if shown.index(shown[i]) != i})
            if dupes:
                raise ValueError(f"the axis '{axis}' lists {', '.join(dupes)} more than once")
            object.__setattr__(self, axis, checked)
        if not any(getattr(self, a) for a in AXES) and not self.include:
            raise ValueError(f"give at least one axis ({', '.join(AXES)}) or an include entry")
        return self


class Spec(_Strict):
    image: ImageSpec
    python: PythonSpec = Field(default_factory=PythonSpec)
    torch: TorchSpec = Field(default_factory=TorchSpec)
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    packages: PackagesSpec = Field(default_factory=PackagesSpec)
    extensions: list[ExtensionSpec] = Field(default_factory=list)
    app: AppSpec = Field(default_factory=AppSpec)
    base: BaseSpec = Field(default_factory=BaseSpec)
    sources: SourcesSpec = Field(default_factory=SourcesSpec)
    steps: list[StepSpec] = Field(default_factory=list, description="commands of the user's own (docs/steps.md)")
    matrix: MatrixSpec | None = Field(default=None, description="many images from one spec (docs/matrix.md)")
    project: ProjectSpec | None = Field(default=None, description="a Python project as input (docs/project.md)")

    @model_validator(mode="after")
    def _image_torch(self) -> Spec:
        if self.torch.source != "image":
            return self
        if not self.base.image:
            raise ValueError(
                "[torch] source = \"image\" takes torch from the base image: set [base] image to an image that "
                "brings torch, such as \"nvcr.io/nvidia/pytorch:25.12-py3\""
            )
        if self.base.python != "image":
            raise ValueError("[torch] source = \"image\" uses the image's own Python: remove [base] python = \"apt\"")
        return self


_MODELS: dict[str, type[BaseModel]] = {
    "": Spec,
    "image": ImageSpec,
    "python": PythonSpec,
    "torch": TorchSpec,
    "gpu": GpuSpec,
    "packages": PackagesSpec,
    "extensions": ExtensionSpec,
    "app": AppSpec,
    "base": BaseSpec,
    "sources": SourcesSpec,
    "matrix": MatrixSpec,
    "steps": StepSpec,
    "project": ProjectSpec,
}


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _describe(err: dict[str, Any], origin: str) -> str:
    loc = [str(p) for p in err["loc"]]
    if not loc:  # a check across tables (Spec's own validators)
        return redact(f"{origin}: {str(err['msg']).removeprefix('Value error, ')}.")
    # the table is the first element; [[extensions]] adds an index
    table = loc[0] if len(loc) > 1 else ""
    key = loc[-1]
    where_parts = [loc[0]] if len(loc) > 1 else []
    if len(loc) > 2 and loc[1].isdigit():
        where_parts = [f"{loc[0]}[{int(loc[1]) + 1}]"]
    entry = loc[0] == "matrix" and len(loc) > 2 and loc[1] in ("include", "exclude") and loc[2].isdigit()
    where = f"[{where_parts[0]}]" if where_parts else "top level"
    if entry:
        where = f"[matrix] {loc[1]}[{int(loc[2]) + 1}]"
    elif loc[0] == "matrix" and len(loc) > 2 and loc[1] in AXES:
        key = loc[1]  # an axis value (loc ends in its index): name the axis
    etype = err["type"]
    if etype == "extra_forbidden":
        model = MatrixEntry if entry else _MODELS.get(table if len(loc) > 1 else "", Spec)
        names = _field_names(model)
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else f" Valid keys: {', '.join(names)}."
        what = "table" if len(loc) == 1 else "key"
        return f"{origin}: unknown {what} '{key}' in {where}.{hint}"
    if etype == "missing":
        return f"{origin}: {where} needs the key '{key}'."
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict | list) else ""
    if etype == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        shown += f'; write it in quotes ("{value}"): TOML reads 3.12 as a number'
    if loc == ["matrix"] or (entry and len(loc) == 3):  # a check of the whole table or entry: no one key
        return redact(f"{origin}: {where if entry else '[matrix]'}: {msg}.")
    return redact(f"{origin}: {where} key '{key}': {msg}{shown}.")


def parse_spec(data: dict[str, Any], origin: str = "kiln.toml") -> Spec:
    """Validate a parsed TOML document."""
    if _depth(data) > MAX_DEPTH:
        raise _too_deep(origin)
    _no_credentials_outside_sources(data, origin)
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        lines = [_describe(dict(err), origin) for err in errors[:8]]
        more = f" (and {len(errors) - 8} more)" if len(errors) > 8 else ""
        raise SpecError(
            " ".join(lines) + more,
            hint="Fix the key(s) named above; `kiln init` writes a commented example of every table.",
        ) from None


def _no_credentials_outside_sources(data: Any, origin: str) -> None:
    """A credential in any table but [sources] would be written into the Dockerfile and the image.

    [sources] reaches a build only as a BuildKit secret, so only there may URLs carry credentials.
    """
    if not isinstance(data, dict):
        return
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items() if k != "sources"]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and has_credential(value):
            table = where.split(".", 1)[0]
            raise SpecError(
                f"{origin}: [{where}] holds a credential ({redact(value)}); it would be stored in the "
                "Dockerfile and the image.",
                hint="Put the index or repository and its credentials in [sources] (index_url, "
                "extra_index_urls: passed to the build as a secret, never stored), or use a netrc; "
                f"keep only the plain name or URL in [{table}].",
            )
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((where, v) for v in value)


def load_spec(path: Path) -> Spec:
    """Read and validate ``kiln.toml``, ``[tool.kiln]`` of a ``pyproject.toml``, or a folder holding either.

    A folder: its ``kiln.toml`` (which wins over a ``[tool.kiln]`` table beside it); else its
    ``pyproject.toml``'s ``[tool.kiln]``; else, for a folder that is a Python project without either
    (a pyproject.toml, requirements.txt or setup.py), the spec ``[project]`` alone (see ``spec_home``).
    """
    p, table = spec_home(path)
    if not p.exists():
        if p.name.lower() in ("true", "false", "yes", "no", "0", "1"):
            raise SpecError(f"{p}: no such file.", hint=f"Flags such as --json take no value: drop '{p.name}'.")
        raise SpecError(f"{p}: no such file.", hint="Give the path of a kiln.toml, or create one with `kiln init`.")
    if table == "implicit":
        return parse_spec(implicit_spec(p.parent), origin=str(p.parent))
    data = _read_toml(p)
    origin = str(p)
    if table == "tool.kiln":
        kiln = (data.get("tool") or {}).get("kiln")
        if kiln is None:  # a pyproject.toml without [tool.kiln]: its project, with torchkiln's defaults
            return parse_spec(implicit_spec(p.parent), origin=str(p))
        if not isinstance(kiln, dict):
            raise SpecError(f"{p}: [tool.kiln] must be a table.",
                            hint="Write it as tables: [tool.kiln.image] name = ..., [tool.kiln.torch] ... .")
        origin = f"{p} [tool.kiln]"
        data = {"project": {}, **kiln}  # the pyproject's own folder is the project
    if "project" in data and "image" not in data and isinstance(data["project"], dict):
        data = {"image": {"name": _project_image_name(p.parent, data["project"])}, **data}
    return parse_spec(data, origin=origin)


#: the files that make a folder a Python project torchkiln can build without a spec of its own
PROJECT_FILES = ("pyproject.toml", "requirements.txt", "setup.py", "uv.lock")


def spec_home(path: Path) -> tuple[Path, str]:
    """Where the spec of ``path`` lives: (file, ``"kiln.toml"`` | ``"tool.kiln"`` | ``"implicit"``).

    ``implicit``: a project folder with neither a kiln.toml nor a [tool.kiln] table; the file is its
    first project file. A path that does not exist comes back as it is (``load_spec`` reports it).
    """
    if not path.is_dir():
        return path, "tool.kiln" if path.name == "pyproject.toml" else "kiln.toml"
    if (path / "kiln.toml").exists():
        return path / "kiln.toml", "kiln.toml"
    pp = path / "pyproject.toml"
    if pp.is_file() and _has_tool_kiln(pp):
        return pp, "tool.kiln"
    for name in PROJECT_FILES:
        if (path / name).is_file():
            return path / name, "implicit"
    return path / "kiln.toml", "kiln.toml"


def spec_notes(path: Path) -> tuple[str, ...]:
    """What the choice of ``spec_home`` should tell the user (a kiln.toml beside a [tool.kiln], a spec made up)."""
    if path.is_dir() and (path / "kiln.toml").exists() and (path / "pyproject.toml").is_file() \
            and _has_tool_kiln(path / "pyproject.toml"):
        return (f"{path / 'kiln.toml'} is used; the [tool.kiln] table of {path / 'pyproject.toml'} is ignored "
                "(kiln.toml wins when both exist: remove one).",)
    file, table = spec_home(path)
    if table == "implicit":
        return (f"{path} has no kiln.toml and no [tool.kiln] table: built as [project] with torchkiln's defaults "
                "(add a [tool.kiln] table to pyproject.toml, or a kiln.toml, to choose torch, GPU targets and the "
                "command).",)
    return ()


def _has_tool_kiln(pyproject: Path) -> bool:
    try:
        return isinstance((tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool") or {}).get("kiln"), dict)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return True  # load_spec reports what is wrong with it


def _project_image_name(spec_dir: Path, project: dict[str, Any]) -> str:
    """An image name for a project that names none: its pyproject's [project] name, else its folder's name."""
    folder = spec_dir / str(project.get("path", "."))
    name = ""
    try:
        name = str((tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8")).get("project") or {})
                   .get("name", ""))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    name = re.sub(r"[^a-z0-9]+", "-", (name or folder.resolve().name).lower()).strip("-")
    return name or "project"


def implicit_spec(folder: Path) -> dict[str, Any]:
    """The spec of a project folder without one: the image named after the project, ``[project]`` as it is."""
    return {"image": {"name": _project_image_name(folder, {})}, "project": {}}


def _read_toml(p: Path) -> dict[str, Any]:
    from torchkiln.fsio import read_text  # refuses FIFOs, devices and folders; caps the size; strict UTF-8

    try:
        text = read_text(p, what="the spec", error=lambda m, h: SpecError(m, h),
                         hint="kiln.toml must be a TOML text file (UTF-8); `kiln init` writes one.")
    except OSError as e:
        raise SpecError(f"{p}: cannot be read ({e.strerror}).", hint="Check the path and its permissions.") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML: {e}.", hint="Fix the TOML syntax at the line named.") from None
    except RecursionError:  # tomllib recurses once per nested array / inline table
        raise _too_deep(str(p)) from None


#: no kiln.toml value nests deeper than [[extensions]] -> env -> value; far more is a mangled file
MAX_DEPTH = 32


def _too_deep(origin: str) -> SpecError:
    return SpecError(
        f"{origin}: arrays or tables nested more than {MAX_DEPTH} deep; no kiln.toml key takes such a value.",
        hint="Remove the nested [ ] / { } (a spec's values are strings, lists of strings and small tables).",
    )


def _depth(data: object) -> int:
    """How deeply lists and tables nest in ``data`` (iteratively: the input may be deeper than the stack)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, d)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
