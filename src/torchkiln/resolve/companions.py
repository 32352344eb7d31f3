"""torchvision / torchaudio beside torch: only a release built for that torch, from torch's own index.

A companion compiled against another torch fails to import ("operator torchvision::nms does not
exist"), and one that does not exist fails the install: both are found here, before anything is
built, from the knowledge base's companion rows (``companions.toml`` plus what ``kiln knowledge
update`` learned). The resolver treats a missing companion like any other problem of a candidate, so
an unpinned torch version moves to the newest release whose companions exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from torchkiln.errors import ResolveError
from torchkiln.knowledge import Knowledge, TorchRelease
from torchkiln.plan import Decision

if TYPE_CHECKING:
    from torchkiln.resolve.ext import Patch, _Candidate
    from torchkiln.spec import Spec


def companion_version(kb: Knowledge, release: TorchRelease, package: str, torch: str) -> tuple[str | None, str]:
    """(version, why-not): the ``package`` release paired with torch ``torch``; version None = none known."""
    row = kb.companion(package, torch)
    if row is not None:
        if row.version:
            return row.version, ""
        return None, row.note or f"no {package} release exists for torch {torch}"
    if package == "torchvision" and torch in release.torchvision:  # the release row's own pairs
        return release.torchvision[torch], ""
    return None, f"the {package} release that matches torch {torch} is not in torchkiln's knowledge base"


def companion_problems(c: _Candidate, spec: Spec, kb: Knowledge) -> list[str]:
    """Why the spec's companions cannot go with this candidate (empty = each has a release for it)."""
    out = []
    for pkg in spec.torch.packages:
        version, why = companion_version(kb, c.release, pkg, c.version)
        if version is None:
            out.append(f"{pkg} has no release for torch {c.version} ({why})")
    return out


def companion_ideas(spec: Spec) -> Iterable[tuple[str, str, Patch]]:
    """Dropping a companion, as a fix the resolver may offer."""
    for pkg in spec.torch.packages:
        rest = [p for p in spec.torch.packages if p != pkg]
        yield "drop companion", f"drop {pkg} from [torch] packages (packages = {rest})", {"torch": {"packages": rest}}


def companion_requirements(spec: Spec, version: str, release: TorchRelease, label: str,
                           kb: Knowledge) -> tuple[str, ...]:
    """``torchvision==0.29.1+cu126``: the variant's own build (its label), from the index torch comes from."""
    out: list[str] = []
    for pkg in spec.torch.packages:
        pinned, why = companion_version(kb, release, pkg, version)
        if pinned is None:  # the candidate checks refuse such a torch first; kept for direct callers
            raise ResolveError(f"{pkg} has no release for torch {version} ({why}).",
                               hint=f"Choose a torch version that has one, or drop {pkg} from [torch] packages.")
        out.append(f"{pkg}=={pinned}{label}")
    return tuple(out)


def companion_decisions(spec: Spec, version: str, release: TorchRelease, kb: Knowledge) -> list[Decision]:
    """One decision per companion: which release, and the row that says so."""
    out = []
    for pkg in spec.torch.packages:
        pinned, _ = companion_version(kb, release, pkg, version)
        row = kb.companion(pkg, version)
        out.append(Decision(
            pkg, pinned or "",
            f"the {pkg} release built against torch {version}; a labelled torch (+cpu, +cuXYZ) gets the same "
            "variant's build from the same index (another build fails to load its C++ ops)",
            row.source if row is not None else release.source))
    return out
