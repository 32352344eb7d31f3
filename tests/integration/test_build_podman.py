"""The same CPU example built with podman (buildah): same Dockerfile, secrets, cache mounts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.podman, pytest.mark.slow]


def test_cpu_example_builds_and_runs_with_podman(
    podman_engine: Engine, podman_base: str, mirror: Any, example_copy: Any, tmp_path: Path,
    stable_context: Any,
) -> None:
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    spec = example_copy(tmp_path / "spec")
    tag = "localhost/kiln-test/example-cpu:podman"
    options = BuildOptions(base=podman_base, tag=tag, context_dir=stable_context("podman-cpu"), flags=mirror.layer)
    summary = build_image(spec, podman_engine, options, env={})
    assert summary.engine["name"] == "podman"
    assert {s.name for s in summary.stages} >= {"torch", "runtime"}
    r = podman_engine.run(tag, ["python", "-c", "import torch, six; print(torch.__version__)"], check=False)
    assert r.returncode == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == "2.13.0+cpu"
    uid = podman_engine.run(tag, ["id", "-u"], check=False)
    assert uid.stdout.strip() not in ("", "0")
    # the SBOM's distributions, read in place from podman's storage, are what the venv lists itself
    from torchkiln.building.execute import installed_distributions
    from torchkiln.provenance import SBOM_SCRIPT

    listed = podman_engine.run(tag, ["/opt/venv/bin/python", "-c", SBOM_SCRIPT], check=False, entrypoint="")
    assert installed_distributions(podman_engine, tag) == json.loads(listed.stdout)

    # an app edit: podman's layer cache keeps the torch step
    app = spec.parent / "apps" / "cpu_app.py"
    app.write_text(app.read_text() + f"\nprint('edited {uuid.uuid4().hex}')\n")  # unique: see test_build_docker
    again = build_image(spec, podman_engine, options, env={})
    torch_run = [s for s in again.steps if s.stage == "torch" and s.name.startswith("RUN")]
    assert torch_run and torch_run[0].status == "cached"
    # buildah commits a layer per instruction: the app COPY and the USER and CMD after it run again;
    # podman 4.3 sometimes also redoes the small COPY --from=packages layer (its cache check for
    # COPY --from a stage built in the same run), never the torch venv (the runtime is FROM torch)
    rebuilt = [s.name for s in again.steps
               if s.is_instruction and not s.name.startswith("FROM") and s.status != "cached"]
    assert any("cpu_app.py" in n for n in rebuilt), rebuilt
    # buildah turns each --label (the provenance labels) into a LABEL step after the last instruction
    allowed = ("COPY --chown=kiln:kiln apps/", "COPY --from=packages ", "USER ", "CMD ", "LABEL ")
    assert all(n.startswith(allowed) for n in rebuilt), rebuilt
    podman_engine.remove_image(tag)
