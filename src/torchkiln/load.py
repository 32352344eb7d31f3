"""Spec → plan (or, with ``[matrix]``, one plan per cell): the first two steps every command shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchkiln.errors import SpecError
from torchkiln.knowledge.overlay import current_knowledge as load_knowledge  # built-in rows + the local overlay
from torchkiln.matrix import ResolvedCell, cell_tags, expand, resolve_matrix
from torchkiln.plan import BuildPlan
from torchkiln.resolve import resolve
from torchkiln.spec import Spec, load_spec, spec_home, spec_notes

if TYPE_CHECKING:
    from torchkiln.image_facts import ImageFacts
    from torchkiln.project import ProjectFacts

FactsReader = Callable[[str], "ImageFacts | None"]


def image_facts(image: str, engine_name: str | None = None) -> ImageFacts | None:
    """The facts of a torch-bearing base image in the local engine, or None when no engine has it.

    Read once per image id (then from torchkiln's cache folder). A corrupt image, or one without
    torch, is an ``InputError`` (exit 7); a missing engine or image is None: the resolver then uses
    the knowledge base's row of the image, with a warning.
    """
    from torchkiln.engines import ImageStore, get_engine
    from torchkiln.errors import EngineMissingError
    from torchkiln.images.facts import read_image_facts

    try:
        engine = get_engine(engine_name)
    except EngineMissingError:
        return None
    # the facts are read from the engine's save of the image: an engine without a store (apptainer)
    # has none to read, as an engine without the image has none
    if not isinstance(engine, ImageStore) or not engine.image_exists(image):
        return None
    return read_image_facts(image, engine)


def engine_facts(engine: Any, *, pull: bool = False) -> FactsReader:
    """A facts reader on one engine (the build's): reads a torch-bearing base image in it, pulling it
    first when ``pull`` (a build needs the image anyway); None where the engine cannot hold it."""

    def read(image: str) -> ImageFacts | None:
        from torchkiln.engines import StoreEngine
        from torchkiln.images.facts import read_image_facts

        if not isinstance(engine, StoreEngine):  # no store (apptainer): no image to read facts from
            return None
        if not engine.image_exists(image) and not (pull and engine.pull(image)):
            return None
        return read_image_facts(image, engine)

    return read


def load_plan(path: Path, *, facts: FactsReader | None = None,
              platform: str | None = None) -> tuple[Spec, BuildPlan, Path]:
    """Load and resolve a spec; returns (spec, plan, the folder that holds the spec).

    A spec with ``[torch] source = "image"`` has its base image's facts read first (``facts``, by
    default :func:`image_facts`: from the local engine). ``platform`` ("linux/arm64", from ``kiln
    build --platform``) replaces the spec's ``[image] platform`` before resolving, so the targets
    and wheels are checked for it.
    """
    p, _ = spec_home(path)
    spec = load_spec(path)
    if platform is not None:
        spec = spec.model_copy(update={"image": spec.image.model_copy(update={"platform": platform})})
    read = None
    if spec.torch.source == "image":
        read = (facts or image_facts)(spec.base.image)
    plan = resolve(spec, load_knowledge(), read, project=read_project_of(spec, p.parent))
    if plan.steps:  # [[steps]] are the user's text: reviewed with torchkiln's lint rules (lint/steps.py)
        from torchkiln.lint.steps import check_steps

        plan = check_steps(plan, str(p))
    notes = spec_notes(path)
    if notes:
        plan = replace(plan, warnings=(*notes, *plan.warnings))
    return spec, plan, p.parent


def read_project_of(spec: Spec, spec_dir: Path) -> ProjectFacts | None:
    """The facts of the spec's ``[project]`` folder (its files read, its lock exported), or None without one."""
    if spec.project is None:
        return None
    from torchkiln.project import read_project

    pr = spec.project
    return read_project(spec_dir, pr.path, extras=tuple(pr.extras), groups=tuple(pr.groups),
                        requirements=tuple(pr.requirements), script=pr.script,
                        python=spec.python.version if "version" in spec.python.model_fields_set else "",
                        platform=spec.image.platform or "linux/amd64")


def load_matrix(path: Path) -> tuple[Spec, tuple[ResolvedCell, ...], Path]:
    """Load a spec with a ``[matrix]`` and resolve every cell (impossible cells keep their error).

    Returns (spec, cells with their tags, the folder that holds the spec). Two cells that would be
    the same image are a ``SpecError``; a spec without ``[matrix]`` is one too (``--matrix`` asks for one).
    """
    p, _ = spec_home(path)
    spec = load_spec(path)
    if spec.matrix is None:
        raise SpecError(
            f"{p} has no [matrix] table, and --matrix builds the cells of one.",
            hint="Drop --matrix to use the spec as it is, or add a [matrix] table (docs/matrix.md), e.g. "
                 '`python = ["3.11", "3.12"]` under [matrix].',
        )
    if spec.project is not None:
        raise SpecError(
            f"{p}: [matrix] with [project] is not supported yet: each cell would need its own resolution of the "
            "project's dependencies.",
            hint="Build the project without --matrix (one spec per torch/CUDA cell), or list the dependencies in "
                 "[packages] pip for a matrix.",
        )
    cells = expand(spec, origin=str(p))
    return spec, cell_tags(spec, resolve_matrix(cells, load_knowledge()), origin=str(p)), p.parent
