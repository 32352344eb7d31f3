"""A registry build cache shared by two machines: build on the main daemon with ``--cache-to``, then a
cold build of the same spec on the second daemon (an empty cache: a second CI machine) with
``--cache-from`` takes the cached steps from the registry instead of running them.

Both machines build on the offline base pushed to the test registry (the second daemon has no
``kiln-base:bookworm`` of its own). Docker 20.10's classic builder exports the cache inline, in the
image pushed to the cache reference: the runtime stage's steps (the torch layer above all).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(1800)]


def push_base(engine: Engine, base: str, registry: Any) -> str:
    """The offline base in the registry, for machines that cannot bootstrap their own."""
    ref = registry.ref(f"kiln-test/base:bookworm-{os.getpid()}")
    engine.tag(base, ref)
    engine.push(ref)
    return ref


def test_a_second_machine_takes_the_torch_layer_from_the_registry_cache(  # type: ignore[no-untyped-def]
    docker_engine: Engine, second_engine: Engine, offline_base: str, registry, mirror, example_copy: Any,
    stable_context: Any, tmp_path: Path,
) -> None:
    pid = os.getpid()
    base = push_base(docker_engine, offline_base, registry)
    cache = registry.ref(f"kiln-test/example-cpu-cache:{pid}")
    spec = example_copy(tmp_path / "spec")
    tag = f"kiln-test/example-cpu:cache-{pid}"
    first = build_image(spec, docker_engine, BuildOptions(
        base=base, tag=tag, context_dir=stable_context("cache-first"), cache_to=cache, flags=mirror.layer,
    ), env={})
    try:
        assert first.cache_to == cache
        # a base from a registry: its digest is in the image's labels
        labels = docker_engine.inspect_image(tag).labels
        assert labels["org.opencontainers.image.base.name"] == base
        assert labels["org.opencontainers.image.base.digest"] == registry.manifest_digest(
            "kiln-test/base", base.rsplit(":", 1)[1])
        assert registry.tags("kiln-test/example-cpu-cache") == [str(pid)]

        # the second machine: an empty cache, the same spec, the cache from the registry
        second = build_image(spec, second_engine, BuildOptions(
            base=base, tag=tag, context_dir=stable_context("cache-second"), cache_from=(cache,), flags=mirror.layer,
        ), env={})
        steps = {s.name: s for s in second.steps}
        assert any(n.startswith("importing cache manifest from " + cache) for n in steps), list(steps)
        torch_step = next(s for s in second.steps if "requirements-torch.txt" in s.name and s.stage == "torch")
        assert torch_step.status == "cached", f"the torch install ran again on the second machine: {torch_step}"
        useradd = next(s for s in second.steps if s.stage == "runtime" and "useradd" in s.name)
        assert useradd.status == "cached"
        assert second.cache_hits >= 2 and second.cache_from == (cache,)
        # the image the second machine made from the cache works
        run = second_engine.run(tag, ["python", "-c", "import torch, six; print(torch.__version__, six.__version__)"])
        assert run.stdout.split() == ["2.13.0+cpu", "1.16.0"]
    finally:
        for ref in (tag, cache, base):
            docker_engine.remove_image(ref)
