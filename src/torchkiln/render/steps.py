"""``[[steps]]``: the user's own commands, rendered verbatim at their point of the Dockerfile and the
Apptainer definition. Pure text.

Where each point is (``render/dockerfile.py``, ``render/vendor.py``, ``render/apptainer.py`` call these):

* ``system``   the end of the ``base`` stage, after ``[packages] apt`` (every later stage has it);
* ``torch``    the end of the ``torch`` stage (on a base whose torch is its own: the end of ``base``);
* ``packages`` the end of the ``packages`` stage, after the pip packages (none: the end of ``torch``);
* ``app``      the ``runtime`` and ``dev`` stages after the app files are copied, as root; the
               runtime's ``USER`` comes after it, so the image still runs as the spec's user.

A step after torch can install with uv against the build's package sources and torch's constraints:
``uv`` is on its ``PATH``, the venv is active and ``UV_CONSTRAINT``/``PIP_CONSTRAINT`` pin torch (a
package that wants another torch fails instead of replacing it). ``cache`` folders are BuildKit cache
mounts (Apptainer: removed at the end of the step), ``secrets`` are BuildKit secrets mounted at
``/run/secrets/NAME`` for that step only (an Apptainer definition has none: refused).
"""

from __future__ import annotations

import shlex

from torchkiln.contract import CONSTRAINTS, VENV
from torchkiln.errors import SpecError
from torchkiln.plan import BuildPlan, StepPlan
from torchkiln.render import instructions as ins

#: what a step after torch sees: the venv, uv and torch's constraints (kiln's own venv plans)
_VENV_ENV = (("PATH", f"{VENV}/bin:/kiln/bin:$PATH"), ("VIRTUAL_ENV", VENV), ("UV_CONSTRAINT", CONSTRAINTS),
             ("PIP_CONSTRAINT", CONSTRAINTS))
#: on a base whose torch is its own, only uv is added (the image's Python and its constraints stay)
_IMAGE_ENV = (("PATH", "/kiln/bin:$PATH"),)


def _export(pairs: list[tuple[str, str]]) -> str:
    """``export A=1 B=…``."""
    return "export " + " ".join(_assign(k, v) for k, v in pairs)


def _assign(name: str, value: str) -> str:
    """``NAME=value``: PATH in double quotes (``$PATH`` expands), every other value shell-quoted."""
    return f'{name}="{value}"' if name == "PATH" else f"{name}={shlex.quote(value)}"


def _kiln_env(plan: BuildPlan, step: StepPlan) -> list[tuple[str, str]]:
    if step.after == "system":
        return []
    return list(_IMAGE_ENV if plan.torch.image is not None else _VENV_ENV)


def secret_mount(name: str) -> str:
    return f"type=secret,id={name},target=/run/secrets/{name}"


def dockerfile_step(plan: BuildPlan, step: StepPlan) -> list[str]:
    """One step: a comment naming it, then one RUN with its mounts, its variables and its commands."""
    mounts = [f"type=cache,target={c}" for c in step.cache]
    commands: list[str] = []
    if step.after != "system":  # uv and the build's package sources, as in kiln's own install steps
        mounts += ins.SOURCE_MOUNTS
        commands.append(". /kiln/sources.sh")
    mounts += [secret_mount(s) for s in step.secrets]
    env = [*_kiln_env(plan, step), *step.env]
    if env:
        commands.append(_export(env))
    commands += step.commands
    return [f"# {step.title}", *ins.run(mounts, commands)]


def dockerfile_steps(plan: BuildPlan, point: str) -> list[str]:
    lines: list[str] = []
    for step in plan.steps_after(point):
        lines += dockerfile_step(plan, step)
    return lines


def packages_point(plan: BuildPlan) -> str:
    """Where the ``packages`` steps go in kiln's own Dockerfile: the packages stage, or torch's without one."""
    return "packages" if plan.pip_packages else "torch"


def apptainer_step(plan: BuildPlan, step: StepPlan) -> list[str]:
    """One step in ``%post`` (``/bin/sh``): its commands run by bash with pipefail, its variables before it."""
    if step.secrets:
        raise SpecError(
            f"[[steps]] {step.index} uses build secrets ({', '.join(step.secrets)}), and an Apptainer definition has "
            "none: whatever %post reads stays in the image's build record.",
            hint="Build the image with docker or podman (BuildKit secrets) and convert it: kiln export IMAGE --format "
                 "sif; or drop secrets from that step.",
        )
    words = [*step.commands, *(v for _, v in step.env)]
    if any("{{" in w for w in words):
        raise SpecError(f"[[steps]] {step.index} holds '{{{{', Apptainer's build-argument syntax.",
                        hint="Remove '{{' from the step in kiln.toml.")
    env = [*_kiln_env(plan, step), *step.env]
    prefix = " ".join(_assign(k, v) for k, v in env)
    commands = list(step.commands)
    if step.after == "app":  # as in the Dockerfile, where the app's WORKDIR is set: %post runs in /
        commands.insert(0, f"cd {shlex.quote(plan.app.workdir)}")
    line = (prefix + " " if prefix else "") + "bash -o pipefail -c " + shlex.quote(" && ".join(commands))
    lines = [f"# {step.title}", line]
    if step.cache:  # no cache mounts in a definition: the folders are emptied so that they reach no image
        lines.append("rm -rf " + " ".join(shlex.quote(c) for c in step.cache))
    return lines


def apptainer_steps(plan: BuildPlan, point: str) -> list[str]:
    lines: list[str] = []
    for step in plan.steps_after(point):
        lines += apptainer_step(plan, step)
    return lines
