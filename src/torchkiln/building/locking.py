"""``kiln lock``: resolve every input of a spec's build once and write ``kiln.lock``; and the locked
build's plan (``locked_plan``): the base by digest, hash-checked installs of exactly the lock.

The resolution is uv's (``uv pip compile --format pylock.toml --python-platform … --python-version
…``), for the target platform, not the host's, with the same package sources a build uses (flags,
``KILN_*``, the spec's ``[sources]``, pip's configuration): the torch group first, then the
packages and the extension build inputs each against the torch pins (as the build installs them,
``-c`` the torch layer's freeze). Without ``--upgrade`` an existing lock's versions are kept where
the spec still allows them (uv reads them as preferences from its previous output). The base
image's digest comes from the engine: its registry digest when it has one, and its image id.
The file format and the pure checks are in ``torchkiln.lock``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchkiln.building import sources as src
from torchkiln.building.context import find_uv
from torchkiln.engines.engine import repository_of
from torchkiln.errors import InputError, LockError, SourceError
from torchkiln.lock import (
    GROUPS,
    Lock,
    LockedBase,
    LockedWheel,
    check_lock,
    lock_path,
    pins,
    plan_inputs,
    read_lock,
    render_lock,
    wheels_from_pylock,
)
from torchkiln.plan import BuildPlan, LockPins
from torchkiln.redact import redact
from torchkiln.runner import Runner

#: uv's target for each image platform: the oldest glibc of the bases torchkiln knows (manylinux_2_28,
#: which the torch wheels also need), so a locked wheel installs on every one of them
UV_PLATFORMS = {"linux/amd64": "x86_64-manylinux_2_28", "linux/arm64": "aarch64-manylinux_2_28"}


def uv_platform(platform: str) -> str:
    try:
        return UV_PLATFORMS[platform]
    except KeyError:
        raise LockError(f"torchkiln cannot lock for the platform {platform}.",
                        hint=f"Lock one of: {', '.join(UV_PLATFORMS)}.") from None


def _normal(repo: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "localhost/"):
        if repo.startswith(prefix):
            return repo[len(prefix):]
    return repo


def base_digest(image: str, repo_digests: Sequence[str]) -> str:
    """The registry digest of ``image`` among the engine's RepoDigests ("" when none is of its repository)."""
    want = _normal(repository_of(image))
    for rd in repo_digests:
        repo, _, digest = rd.partition("@")
        if _normal(repo) == want and digest.startswith("sha256:"):
            return digest
    return ""


def lock_base(engine: Any, image: str) -> LockedBase:
    """The base image as the engine has it (pulled first when it is not local)."""
    if not engine.image_exists(image) and not engine.pull(image):
        raise InputError(
            f"the base image {image} is not in {engine.info.name}'s local store and cannot be pulled, so it "
            "cannot be locked.",
            hint="Pull or build it first (`kiln base bootstrap` for an offline base), then run kiln lock again.",
        )
    details = engine.inspect_image(image)
    return LockedBase(image=image, digest=base_digest(image, details.repo_digests), id=details.id)


@dataclass(frozen=True)
class UvCompiler:
    """Runs ``uv pip compile`` with one build's package sources (never printed: they may hold tokens)."""

    sources: src.Sources
    runner: Runner
    uv: Path

    def uv_toml(self) -> str:
        extras = ([self.sources.torch_index] if self.sources.torch_index else []) + list(self.sources.extra_index_urls)
        return src.render_uv_toml(index_url=self.sources.index_url, extra_index_urls=extras,
                                  find_links=self.sources.find_links, index_strategy=self.sources.index_strategy)

    def compile(self, requirements: Sequence[str], *, python: str, platform: str, constraints: Sequence[str] = (),
                preferences: Sequence[str] = (), upgrade: bool = False, group: str) -> str:
        """uv's ``pylock.toml`` for ``requirements`` (with ``preferences`` kept where still allowed)."""
        if python.endswith("t"):  # uv's --python-version takes no free-threaded marker: it would lock cp3X wheels
            raise LockError(
                f"kiln lock cannot lock for the free-threaded Python {python} yet: `uv pip compile --python-version` "
                f"accepts no 't' suffix, so it would pin the GIL build's wheels (cp{python[:-1].replace('.', '')}) "
                f"instead of the cp{python.replace('.', '')} ones the image installs.",
                hint="Build without --locked (uv resolves against the image's own interpreter), or lock a GIL "
                "Python.")
        with tempfile.TemporaryDirectory(prefix="kiln-lock-") as tmp:
            d = Path(tmp)
            (d / "uv.toml").write_text(self.uv_toml())
            os.chmod(d / "uv.toml", 0o600)
            (d / "requirements.in").write_text("".join(f"{r}\n" for r in requirements))
            (d / "constraints.txt").write_text("".join(f"{r}\n" for r in constraints))
            base = [str(self.uv), "pip", "compile", "--config-file", str(d / "uv.toml"), "--no-header",
                    "--python-version", python, "--python-platform", uv_platform(platform),
                    "-c", str(d / "constraints.txt"), str(d / "requirements.in")]
            env = {"UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"}
            if self.sources.ca_bundle:
                env["SSL_CERT_FILE"] = self.sources.ca_bundle
            pinned = constraints
            if preferences and not upgrade:
                # uv keeps the versions of its previous output file where the requirements allow them
                (d / "preferred.txt").write_text("".join(f"{p}\n" for p in preferences))
                self._run([*base, "-o", str(d / "preferred.txt")], env, group)
                pinned = [*constraints, *(ln for ln in (d / "preferred.txt").read_text().splitlines()
                                          if ln and not ln.startswith(("#", " ")))]
                (d / "constraints.txt").write_text("".join(f"{r}\n" for r in pinned))
            self._run([*base, *(["--upgrade"] if upgrade else []), "--format", "pylock.toml",
                       "-o", str(d / "pylock.toml")], env, group)
            return (d / "pylock.toml").read_text()

    def _run(self, argv: list[str], env: Mapping[str, str], group: str) -> None:
        r = self.runner.run(argv, env=dict(env), check=False, what="uv pip compile")
        if r.returncode != 0:
            text = redact(r.tail(20))
            cls = SourceError if any(w in text for w in ("Failed to fetch", "error sending request", "dns error",
                                                         "Connection refused")) else LockError
            raise cls(
                f"uv could not resolve the {group} requirements of the spec for the lock.",
                hint="uv's words above say why: a version no index has, a conflict between packages, or an index that "
                     "cannot be reached (the same package sources as `kiln build` are used: --index-url, KILN_*, "
                     "[sources], --sources-from-pip).",
                details=text,
            )


@dataclass(frozen=True)
class LockResult:
    path: Path
    lock: Lock
    seconds: float
    changed: bool

    def to_dict(self) -> dict[str, Any]:
        groups = {g: len({(w.name, w.version) for w in self.lock.wheels if w.group == g}) for g in GROUPS}
        return {"lock": str(self.path), "seconds": round(self.seconds, 2), "changed": self.changed,
                "base": {"image": self.lock.base.image, "digest": self.lock.base.digest, "id": self.lock.base.id},
                "packages": groups, "platforms": list(self.lock.inputs.platforms)}


def lockable(plan: BuildPlan) -> None:
    """Only plans that install released torch wheels can be locked."""
    if plan.torch.build is not None:
        raise LockError("kiln lock pins released torch wheels; this spec compiles torch from source.",
                        hint="Build without a lock (the torch build is pinned by its git ref).")
    if plan.torch.image is not None:
        raise LockError("kiln lock pins the torch wheels kiln installs; this spec takes torch from its base image.",
                        hint="Pin the base image by digest in the spec (image = \"repo@sha256:…\") instead.")


def make_lock(plan: BuildPlan, spec_path: Path, engine: Any, sources: src.Sources, runner: Runner, *,
              upgrade: bool = False, previous: Lock | None = None) -> Lock:
    """Resolve ``plan`` (its base already replaced by ``--base``) into a lock."""
    lockable(plan)
    inputs = plan_inputs(plan)
    if previous is not None and previous.base.image == inputs.base and not upgrade:
        base = previous.base
    else:
        base = lock_base(engine, inputs.base)
    uv = UvCompiler(sources, runner, find_uv())
    wheels: list[LockedWheel] = []
    for platform in inputs.platforms:
        def old(group: str, platform: str = platform) -> list[str]:
            return [] if previous is None else pins(previous.wheels_of(group, platform))

        torch = wheels_from_pylock(uv.compile(inputs.torch, python=plan.python, platform=platform,
                                              preferences=old("torch"), upgrade=upgrade, group="torch"),
                                   "torch", platform)
        wheels += torch
        for group in ("packages", "build"):
            reqs = inputs.requirements(group)
            if reqs:
                text = uv.compile(reqs, python=plan.python, platform=platform, constraints=pins(torch),
                                  preferences=old(group), upgrade=upgrade, group=group)
                wheels += wheels_from_pylock(text, group, platform)
    return Lock(inputs, base, tuple(wheels))


def lock_spec(spec_path: Path, engine: Any, *, base: str | None = None, sources: src.Sources,
              runner: Runner, upgrade: bool = False) -> LockResult:
    """Write the spec's lock beside it (whole, or not at all)."""
    from torchkiln.load import load_plan

    start = time.monotonic()
    _spec, plan, _dir = load_plan(spec_path)
    if base:
        plan = dataclasses.replace(plan, base_image=base)
    path = lock_path(spec_path)
    previous: Lock | None = None
    if path.exists():
        try:
            previous = read_lock(path)
        except LockError:
            previous = None  # unreadable: written anew
    lock = make_lock(plan, spec_path, engine, sources, runner, upgrade=upgrade, previous=previous)
    text = render_lock(lock)
    changed = not path.exists() or path.read_text(encoding="utf-8") != text
    if changed:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return LockResult(path, lock, time.monotonic() - start, changed)


def locked_plan(plan: BuildPlan, spec_path: Path) -> tuple[BuildPlan, Lock]:
    """``plan`` built exactly as its lock says (``kiln build --locked``), or a LockError.

    The base becomes ``repo@sha256:…`` when the lock has a registry digest (a base in the local
    store only is checked by image id before the build: see ``execute``); the torch and packages
    requirement files become the lock's hashed pins, installed with ``--require-hashes``.
    """
    path = lock_path(spec_path)
    lockable(plan)
    lock = read_lock(path)
    check_lock(lock, plan_inputs(plan), path)
    platform = plan.platform
    locked = LockPins(
        torch=lock.hashed_requirements("torch", platform),
        packages=lock.hashed_requirements("packages", platform),
        base_id=lock.base.id,
        lock=str(path),
    )
    if not locked.torch:
        raise LockError(f"{path} holds no torch wheels for {platform}.", hint=f"Write it again: kiln lock {spec_path}")
    return dataclasses.replace(plan, base_image=lock.base.pinned_ref or plan.base_image, locked=locked), lock
