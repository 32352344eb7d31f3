"""The image store of the OCI engines, for real: tag, save, remove, load back (what moving an image
between builders needs), on docker and on podman."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.engines import Engine, ImageStore, require_store

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("which", ["docker", "podman"])
def test_save_then_load_gives_back_the_tagged_image(which: str, request: pytest.FixtureRequest,
                                                    tmp_path: Path) -> None:
    engine: Engine = request.getfixturevalue(f"{which}_engine")
    base: str = request.getfixturevalue("offline_base" if which == "docker" else "podman_base")
    assert isinstance(engine, ImageStore)
    store = require_store(engine, "test", "-")
    ref = f"kiln-test/engines-store-{which}:1"
    store.tag(base, ref)
    try:
        image_id = store.inspect_image(ref).id
        archive = store.save(ref, tmp_path / "image.tar")
        assert archive.stat().st_size > 1_000_000
        assert store.remove_image(ref) and not store.image_exists(ref)
        loaded = store.load(archive)
        assert loaded.endswith(ref)  # podman names it localhost/REF
        assert store.image_exists(ref) and store.inspect_image(ref).id == image_id
    finally:
        store.remove_image(ref)
