"""Build options that are the user's choice, not the plan's: how an apptainer build gets its base.

``ApptainerOptions`` is what ``kiln build --engine apptainer`` and ``kiln render --format apptainer``
take (``--bootstrap``, ``--from``, ``--builder-from``); the definition's renderer reads it through
``torchkiln.render.apptainer.BaseSource`` and imports nothing from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchkiln.plan import BuildPlan
from torchkiln.render import apptainer as definition
from torchkiln.render.apptainer import Bootstrap


@dataclass(frozen=True)
class ApptainerOptions:
    """How the definition gets its base image (see ``torchkiln.render.apptainer.BaseSource``).

    ``docker`` pulls ``source`` (default: the plan's base image) from a registry at build time. For
    offline sites: ``docker-daemon`` takes it from the local Docker daemon, ``docker-archive`` /
    ``oci-archive`` from a tar written by ``docker save`` / ``kiln export``, ``localimage`` from a
    ``.sif`` on disk; those three need ``source`` (a path, absolute or relative to the build folder).
    """

    bootstrap: Bootstrap = "docker"
    source: str | None = None
    #: the builder stage's base (two-stage definitions only): default the plan's toolchain image
    builder_source: str | None = None

    @property
    def takes_files(self) -> bool:
        """Whether ``source`` / ``builder_source`` are file paths (not image references)."""
        return definition.takes_files(self.bootstrap)

    def from_value(self, plan: BuildPlan) -> str:
        return definition.from_value(plan, self)

    def builder_from_value(self, plan: BuildPlan) -> str:
        return definition.builder_from_value(plan, self)
