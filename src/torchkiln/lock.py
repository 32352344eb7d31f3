"""``kiln.lock``: every input of a build pinned, and the check that a lock still answers its spec.

A lock sits next to its spec (``kiln.toml`` → ``kiln.lock``, ``cpu.toml`` → ``cpu.lock``) and holds:

- ``[inputs]``: the parts of the plan it answers (base image name, Python, platforms, the torch,
  packages and extension-build requirements as the spec gives them). ``kiln build --locked``
  refuses a lock whose inputs differ from the spec's plan (``stale_reasons``), naming what changed;
- ``[base]``: the base image's registry digest (``FROM repo@sha256:…``) and its image id (the
  config digest; for a base that exists only in the engine's store, the only pin there is);
- ``[[wheels]]``: every distribution of every group (``torch``: torch and its companions;
  ``packages``; ``build``: what extensions are compiled with) per platform: name, version, URL
  (index, file or wheel folder) and sha256. uv resolves them (``uv pip compile --format
  pylock.toml``, see ``torchkiln.building.locking``); this module only reads uv's output and writes
  and reads our own file.

Pure (no engine, no network): parsing, rendering, the staleness check and the hashed requirement
files a locked build installs (``uv pip install --require-hashes``). Our own format rather than
uv's pylock.toml because one lock covers several resolutions (the torch layer, the packages
installed against it, the extension build inputs) plus the base image, and it must say what it was
made from.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from torchkiln import __version__
from torchkiln.errors import LockError
from torchkiln.plan import BuildPlan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK_VERSION = 1
GROUPS = ("torch", "packages", "build")

HEADER = (
    "# Written by `kiln lock` (torchkiln {version}); `kiln build --locked` installs exactly this.\n"
    "# Do not edit: change the spec and run `kiln lock` again (`--upgrade` for newer versions).\n"
)


def lock_path(spec_path: Path) -> Path:
    """The lock of a spec: ``kiln.toml`` → ``kiln.lock`` beside it (a folder means its kiln.toml)."""
    spec = spec_path / "kiln.toml" if spec_path.is_dir() else spec_path
    return spec.with_suffix(".lock")


@dataclass(frozen=True)
class LockInputs:
    """What of a plan a lock answers; two plans with equal inputs resolve to the same lock."""

    base: str
    python: str
    platforms: tuple[str, ...]
    torch: tuple[str, ...]
    packages: tuple[str, ...]
    build: tuple[str, ...]

    def requirements(self, group: str) -> tuple[str, ...]:
        return {"torch": self.torch, "packages": self.packages, "build": self.build}[group]

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "python": self.python, "platforms": list(self.platforms),
                "torch": list(self.torch), "packages": list(self.packages), "build": list(self.build)}


def build_inputs(plan: BuildPlan) -> tuple[str, ...]:
    """What extensions are compiled with: the toolchain's compiler wheels and each one's build requirements."""
    reqs: list[str] = []
    for chain in (plan.toolchain,):
        if chain is not None and chain.kind == "wheels":
            reqs += chain.compiler
    for ext in plan.extensions:
        reqs += ext.build_requires
    return tuple(dict.fromkeys(reqs))


def plan_inputs(plan: BuildPlan) -> LockInputs:
    """The inputs of ``plan`` (its base as planned: apply ``--base`` before calling)."""
    return LockInputs(
        base=plan.base_image,
        python=plan.python,
        platforms=(plan.platform,),
        torch=(plan.torch.requirement, *plan.torch.companions),
        packages=tuple(plan.pip_packages),
        build=build_inputs(plan),
    )


@dataclass(frozen=True)
class LockedBase:
    image: str  # the name the spec (or --base) gives
    digest: str  # the registry's manifest digest ("" when the image was never pushed or pulled)
    id: str  # the engine's image id (config digest)

    @property
    def pinned_ref(self) -> str | None:
        """``repo@sha256:…`` for a base with a registry digest; None for a base in the local store only."""
        if not self.digest:
            return None
        from torchkiln.engines.engine import repository_of

        return f"{repository_of(self.image)}@{self.digest}"


@dataclass(frozen=True)
class LockedWheel:
    group: str
    platform: str
    name: str
    version: str
    url: str  # where it was found (an index's file URL, a wheel folder's file, a remote URL)
    sha256: str
    kind: str = "wheel"  # or "sdist"

    def to_dict(self) -> dict[str, str]:
        return {"group": self.group, "platform": self.platform, "name": self.name, "version": self.version,
                "kind": self.kind, "url": self.url, "sha256": self.sha256}


@dataclass(frozen=True)
class Lock:
    inputs: LockInputs
    base: LockedBase
    wheels: tuple[LockedWheel, ...] = field(default_factory=tuple)

    def wheels_of(self, group: str, platform: str) -> tuple[LockedWheel, ...]:
        return tuple(w for w in self.wheels if w.group == group and w.platform == platform)

    def hashed_requirements(self, group: str, platform: str) -> tuple[str, ...]:
        """``name==version --hash=sha256:…`` lines (every distribution locked for that pin), sorted."""
        pins: dict[tuple[str, str], list[str]] = {}
        for w in self.wheels_of(group, platform):
            pins.setdefault((w.name, w.version), []).append(w.sha256)
        return tuple(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(set(hashes)))
                     for (name, version), hashes in sorted(pins.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "lock-version": LOCK_VERSION,
            "inputs": self.inputs.to_dict(),
            "base": {"image": self.base.image, "digest": self.base.digest, "id": self.base.id},
            "wheels": [w.to_dict() for w in self.wheels],
        }


def render_lock(lock: Lock) -> str:
    """The text of ``kiln.lock`` (deterministic: same lock, same bytes)."""
    wheels = sorted(lock.wheels, key=lambda w: (GROUPS.index(w.group), w.platform, w.name, w.version, w.url))
    data = {**lock.to_dict(), "wheels": [w.to_dict() for w in wheels]}
    return HEADER.format(version=__version__) + tomli_w.dumps(data)


def _bad(path: Path, what: str) -> LockError:
    return LockError(f"{path} is not a lock torchkiln can read: {what}.",
                     hint=f"Write it again: kiln lock {path.with_suffix('.toml')} (it is generated; never edit it).")


def _strings(value: Any, path: Path, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(path, f"'{key}' is not a list of strings")
    return tuple(value)


def _string(table: Mapping[str, Any], key: str, path: Path, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str):
        raise _bad(path, f"{where} has no string '{key}'")
    return value


def parse_lock(text: str, path: Path) -> Lock:
    """Read a lock's text; a clear LockError for anything that is not one of ours."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, f"not TOML ({e})") from None
    if data.get("lock-version") != LOCK_VERSION:
        raise _bad(path, f"lock-version {data.get('lock-version')!r}, this torchkiln reads {LOCK_VERSION}")
    inputs, base = data.get("inputs"), data.get("base")
    if not isinstance(inputs, dict) or not isinstance(base, dict):
        raise _bad(path, "the [inputs] or [base] table is missing")
    li = LockInputs(
        base=_string(inputs, "base", path, "[inputs]"),
        python=_string(inputs, "python", path, "[inputs]"),
        platforms=_strings(inputs.get("platforms"), path, "platforms"),
        torch=_strings(inputs.get("torch"), path, "torch"),
        packages=_strings(inputs.get("packages", []), path, "packages"),
        build=_strings(inputs.get("build", []), path, "build"),
    )
    lb = LockedBase(*(_string(base, k, path, "[base]") for k in ("image", "digest", "id")))
    wheels: list[LockedWheel] = []
    for i, w in enumerate(data.get("wheels") or []):
        if not isinstance(w, dict):
            raise _bad(path, f"wheels entry {i + 1} is not a table")
        where = f"wheels entry {i + 1}"
        lw = LockedWheel(**{k: _string(w, k, path, where)
                            for k in ("group", "platform", "name", "version", "url", "sha256", "kind")})
        if lw.group not in GROUPS:
            raise _bad(path, f"{where} has the unknown group {lw.group!r}")
        if len(lw.sha256) != 64 or any(c not in "0123456789abcdef" for c in lw.sha256):
            raise _bad(path, f"{where} ({lw.name}) has no sha256 hash")
        wheels.append(lw)
    return Lock(li, lb, tuple(wheels))


def read_lock(path: Path) -> Lock:
    """The lock at ``path``; a LockError naming `kiln lock` when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"--locked needs a lock, and {path} does not exist.",
                        hint=f"Write it with `kiln lock {path.with_suffix('.toml')}` and commit it beside "
                             "the spec.") from None
    return parse_lock(text, path)


def _diff(old: Sequence[str], new: Sequence[str]) -> str:
    added = [x for x in new if x not in old]
    removed = [x for x in old if x not in new]
    return ", ".join([*(f"+{x}" for x in added), *(f"-{x}" for x in removed)]) or "reordered"


def stale_reasons(lock: Lock, inputs: LockInputs) -> list[str]:
    """What changed in the spec's plan since the lock was written (empty: the lock answers it)."""
    old = lock.inputs
    reasons: list[str] = []
    if old.base != inputs.base:
        reasons.append(f"the base image is {inputs.base}, the lock's is {old.base}")
    if old.python != inputs.python:
        reasons.append(f"Python is {inputs.python}, the lock's is {old.python}")
    for group in GROUPS:
        a, b = old.requirements(group), inputs.requirements(group)
        if a != b:
            reasons.append(f"the {group} requirements changed ({_diff(a, b)})")
    return reasons


def check_lock(lock: Lock, inputs: LockInputs, path: Path) -> None:
    """Raise a LockError when ``lock`` does not answer ``inputs`` (another platform, or stale)."""
    missing = [p for p in inputs.platforms if p not in lock.inputs.platforms]
    if missing:
        raise LockError(
            f"{path} was written for {', '.join(lock.inputs.platforms)}, and the spec builds {', '.join(missing)}.",
            hint=f"Lock this platform too: kiln lock {path.with_suffix('.toml')} (on any machine: uv resolves for "
                 "the target platform, not the host's).",
        )
    reasons = stale_reasons(lock, inputs)
    if reasons:
        spec = path.with_suffix(".toml")
        hint = (f"Update it with `kiln lock {spec}` (the other pins are kept; --upgrade "
                "takes newer versions) and commit it, or build without --locked.")
        if lock.inputs.base != inputs.base and len(reasons) == 1:
            # only the base differs: most often the lock was written with --base and the build runs without it
            hint = (f"Build on the lock's base: `kiln build {spec} --locked --base {lock.inputs.base}`, or make it "
                    f"this machine's base once (`kiln config set base {lock.inputs.base}`) so that every command "
                    f"takes it; or lock the new base: `kiln lock {spec} --base {inputs.base}`.")
        raise LockError(f"{path} is stale: since it was written, " + "; ".join(reasons) + ".", hint=hint)


def wheels_from_pylock(text: str, group: str, platform: str) -> list[LockedWheel]:
    """The distributions of a PEP 751 ``pylock.toml`` (uv's output), as wheels of ``group``/``platform``."""
    data = tomllib.loads(text)
    out: list[LockedWheel] = []
    for pkg in data.get("packages") or []:
        name, version = str(pkg.get("name", "")), str(pkg.get("version", ""))
        dists = [("wheel", w) for w in pkg.get("wheels") or []]
        if pkg.get("sdist"):
            dists.append(("sdist", pkg["sdist"]))
        if not dists:
            raise LockError(f"uv locked {name} {version} without a distribution file (a local folder or VCS "
                            "checkout cannot be hash-checked).",
                            hint="Name a released version of it, or build it as an [[extensions]] entry.")
        for kind, d in dists:
            sha = (d.get("hashes") or {}).get("sha256", "")
            url = d.get("url") or d.get("path") or pkg.get("index") or ""
            out.append(LockedWheel(group, platform, name, version, str(url), str(sha), kind))
    return out


def inputs_digest(inputs: LockInputs) -> str:
    """A short fingerprint of the inputs (shown by `kiln lock`)."""
    return hashlib.sha256(repr(sorted(inputs.to_dict().items())).encode()).hexdigest()[:12]


def pins(wheels: Iterable[LockedWheel]) -> list[str]:
    """``name==version`` for each distinct pin (constraints for the groups installed on top)."""
    return sorted({f"{w.name}=={w.version}" for w in wheels})
