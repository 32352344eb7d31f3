"""Container engines: the only place in torchkiln that builds or runs containers.

``get_engine(name)`` returns a ready engine — docker (BuildKit) first, then podman, when no name is
given — after probing that it really works: the client can use BuildKit, the daemon answers, the
versions are supported. When none is usable, ``EngineMissingError`` says, for every candidate, why
not and what to install or start.

Apptainer (``.sif`` files, for HPC sites) is an engine too, but it is never picked on its own: it
has no image store, so an image built with it is not where docker/podman users look for one. It is
used only when named (``--engine apptainer`` or ``KILN_ENGINE=apptainer``).

Every engine is an ``Engine`` (the protocol in ``engine.py``); docker and podman are one
``OciEngine`` with a flavour each and are also an ``ImageStore``. Code that needs a store asks
``require_store(engine, …)``, never the engine's name or class.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from torchkiln.engines.apptainer import INSTALL_HINT as APPTAINER_INSTALL_HINT
from torchkiln.engines.apptainer import ApptainerEngine, probe_apptainer
from torchkiln.engines.docker import DOCKER, DockerEngine
from torchkiln.engines.engine import (
    AUTO_ENGINES,
    ENGINE_NAMES,
    BuildCommand,
    BuildEvent,
    BuildOutcome,
    BuildRequest,
    Engine,
    EngineInfo,
    EngineName,
    ImageDetails,
    ImageStore,
    Mount,
    Output,
    RunRequest,
    StepRecord,
    StoreEngine,
    output_of,
    require_store,
)
from torchkiln.engines.oci import OciEngine, OciFlavour, Probe
from torchkiln.engines.podman import PODMAN, PodmanEngine
from torchkiln.errors import EngineMissingError
from torchkiln.runner import Runner

__all__ = [
    "ENGINE_NAMES",
    "ApptainerEngine",
    "BuildCommand",
    "BuildEvent",
    "BuildOutcome",
    "BuildRequest",
    "DockerEngine",
    "Engine",
    "EngineInfo",
    "EngineName",
    "ImageDetails",
    "ImageStore",
    "Mount",
    "Output",
    "OciEngine",
    "OciFlavour",
    "PodmanEngine",
    "RunRequest",
    "StepRecord",
    "StoreEngine",
    "MATRIX_ENGINE",
    "get_engine",
    "get_engine_for",
    "output_of",
    "probe_engines",
    "require_store",
]

#: the engines with an image store, in the order they are tried when none is named
OCI_FLAVOURS: tuple[OciFlavour, ...] = (DOCKER, PODMAN)
#: the engine whose client drives a pool of builders (``kiln build --matrix``: contexts, DOCKER_HOST, buildx)
MATRIX_ENGINE = DOCKER.name


def probe_engines(
    name: str | None = None, runner: Runner | None = None, env: Mapping[str, str] | None = None
) -> list[Probe]:
    """Probe the candidates for ``name`` (docker, then podman, when None) in order of preference.

    Stops at the first usable one; the list holds the failed probes before it. Apptainer is probed
    only when it is the engine asked for.
    """
    runner = runner or Runner()
    env = os.environ if env is None else env
    wanted = name or env.get("KILN_ENGINE") or None
    if wanted is not None and wanted not in ENGINE_NAMES:
        raise EngineMissingError(
            f"unknown engine {wanted!r}.", hint=f"Choose one of: {', '.join(ENGINE_NAMES)}."
        )
    probes: list[Probe] = []
    if wanted == "apptainer":
        try:
            engine = probe_apptainer(runner, env)
        except EngineMissingError as e:
            return [Probe("apptainer", None, e.message, e.hint or APPTAINER_INSTALL_HINT)]
        return [Probe(engine.info.binary, engine)]
    assert wanted is None or wanted in AUTO_ENGINES
    for flavour in OCI_FLAVOURS:
        if wanted not in (None, flavour.name):
            continue
        candidates = flavour.candidates(env)
        if not candidates:
            probes.append(Probe(flavour.name, None, f"{flavour.name} is not installed", flavour.install_hint))
        for binary in candidates:
            p = flavour.probe(binary, runner)
            probes.append(p)
            if p.engine is not None:
                return probes
    return probes


def get_engine(
    name: str | None = None, runner: Runner | None = None, env: Mapping[str, str] | None = None
) -> Engine:
    """The engine to use: ``name`` (docker, podman, apptainer), else ``KILN_ENGINE``, else the first usable
    of docker and podman."""
    env = os.environ if env is None else env
    probes = probe_engines(name, runner, env)
    for p in probes:
        if p.engine is not None:
            return p.engine
    wanted = name or env.get("KILN_ENGINE")
    if wanted == "apptainer":  # one probe, whose message already names every binary it tried
        raise EngineMissingError(probes[0].reason, hint=probes[0].hint)
    reasons = "; ".join(f"{p.binary}: {p.reason}" for p in probes)
    what = f"{wanted} cannot be used" if wanted else "no usable container engine was found"
    hints: list[str] = []
    for p in probes:
        if p.hint and p.hint not in hints:
            hints.append(p.hint)
    if DOCKER.install_hint in hints and PODMAN.install_hint in hints:  # the docker hint names podman too
        hints.remove(PODMAN.install_hint)
    raise EngineMissingError(f"{what} ({reasons}).", hint=" ".join(hints))


def get_engine_for(name: str | None, runner: Runner | None = None, *, sif_file: bool = False) -> Engine:
    """The engine for an existing image: ``name``'s, else apptainer for a ``.sif`` file (``sif_file``),
    else as ``get_engine``."""
    if output_of(name) == "sif" or (name is None and sif_file):
        return probe_apptainer(runner or Runner())
    return get_engine(name, runner)
