"""`kiln lock` with this machine's package mirror, then `kiln build --locked` with docker: the image holds
exactly the locked versions, the lock's hashes are the files' own, and a spec edited after the lock
is refused (exit 14) before anything is built."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from conftest import source_flags
from torchkiln.engines import Engine
from torchkiln.errors import ExitCode
from torchkiln.lock import read_lock

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(1800)]

INSTALLED = ("import json, importlib.metadata as m; "
             "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")


def kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchkiln", *args], capture_output=True, text=True, timeout=1200)


def test_lock_then_build_exactly_the_lock(  # type: ignore[no-untyped-def]
    docker_engine: Engine, offline_base: str, mirror, example_copy: Any, stable_context: Any, tmp_path: Path,
) -> None:
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    spec = example_copy(tmp_path / "spec")
    flags = source_flags(mirror.layer)
    r = kiln("lock", str(spec), "--base", offline_base, "--json", *flags)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["changed"] and out["lock"] == str(spec.with_suffix(".lock"))
    lock = read_lock(spec.with_suffix(".lock"))
    assert lock.base.id == docker_engine.inspect_image(offline_base).id
    torch = [w for w in lock.wheels if w.name == "torch"]
    assert [(w.group, w.version, w.platform) for w in torch] == [("torch", "2.13.0+cpu", "linux/amd64")]
    if torch[0].url.startswith("file://"):  # the hash is the wheel's own
        local = Path(urllib.request.url2pathname(urllib.parse.urlsplit(torch[0].url).path))
        assert hashlib.sha256(local.read_bytes()).hexdigest() == torch[0].sha256
    assert {w.name for w in lock.wheels if w.group == "packages"} >= {"six", "numpy"}

    again = kiln("lock", str(spec), "--base", offline_base, "--json", *flags)
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False  # the same inputs, the same bytes

    tag = f"kiln-test/locked-cpu:{os.getpid()}"
    build = ["build", str(spec), "--locked", "--base", offline_base, "--tag", tag,
             "--context", str(stable_context("locked-cpu")), *flags]
    try:
        r = kiln(*build, "--json")
        assert r.returncode == 0, r.stderr
        installed = json.loads(docker_engine.run(tag, ["python", "-c", INSTALLED]).stdout)
        installed = {canonicalize_name(k): v for k, v in installed.items()}
        for w in lock.wheels:
            if w.group in ("torch", "packages"):
                assert installed.get(canonicalize_name(w.name)) == w.version, f"{w.name}: not the locked version"

        # what is inside: provenance labels and the SBOM with the locked hashes, shown by kiln inspect
        r = kiln("inspect", tag, "--json")
        assert r.returncode == 0, r.stderr
        prov = json.loads(r.stdout)["provenance"]
        labels = prov["labels"]
        assert labels["org.opencontainers.image.base.name"] == offline_base
        assert labels["org.opencontainers.image.version"] == "latest"  # the spec's tag: [image] tag
        assert labels["org.opencontainers.image.created"].endswith("Z")
        comps = {c["name"].lower(): c for c in prov["sbom"]["components"]}
        assert comps["torch"]["version"] == "2.13.0+cpu" and comps["torch"]["sha256"] == [torch[0].sha256]
        assert set(comps) >= {"six", "numpy"}

        # the spec moved on: exit 14, what changed, and nothing built
        spec.write_text(spec.read_text().replace('"six==1.16.0", ', ""))
        r = kiln(*build)
        assert r.returncode == ExitCode.LOCK, r.stderr
        assert "stale" in r.stderr and "-six==1.16.0" in r.stderr and "kiln lock" in r.stderr
        assert "Traceback" not in r.stderr and "building" not in r.stderr
    finally:
        docker_engine.remove_image(tag)
