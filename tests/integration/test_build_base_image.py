"""`kiln base bootstrap`: the offline base image, made with debootstrap and found again by tag."""

from __future__ import annotations

import time

import pytest

from torchkiln.building.bootstrap import BaseRequest, bootstrap
from torchkiln.contract import BASE_LABEL_PREFIX as LABEL_PREFIX
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine]


def test_base_has_python_and_no_apt_lists(docker_engine: Engine, offline_base: str) -> None:
    details = docker_engine.inspect_image(offline_base)
    assert details.labels[f"{LABEL_PREFIX}.python"] == "3.11"
    assert details.labels[f"{LABEL_PREFIX}.suite"] == "bookworm"
    assert details.size < 200_000_000
    r = docker_engine.run(
        offline_base,
        ["sh", "-c", "python3 -c 'import sys; print(sys.version_info[:2])'; ls /var/lib/apt/lists; "
         "ls /var/cache/apt/archives; ls /usr/share/man 2>/dev/null | wc -l"],
        check=False,
    )
    assert r.returncode == 0, r.output
    lines = r.stdout.split()
    assert "(3," in r.stdout and "11)" in r.stdout
    assert "partial" in lines
    assert not any(x.endswith(".deb") or "_dists_" in x for x in lines)


def test_second_bootstrap_is_a_cache_hit(docker_engine: Engine, offline_base: str) -> None:
    start = time.monotonic()
    result = bootstrap(docker_engine, BaseRequest())
    assert result.image == offline_base
    assert not result.created
    assert result.python == "3.11"
    assert time.monotonic() - start < 10
