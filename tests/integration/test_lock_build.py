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


#: every file under the venv's site-packages with its sha256, but bytecode (a .pyc holds its
#: source's mtime, which the install sets) and uv's own install record of a wheel from a local folder
#: (``*.dist-info/uv_cache.json`` holds the time uv unpacked it, and RECORD lists that file's hash)
SITE_HASHES = (
    "import hashlib, json, os, sysconfig\n"
    "root = sysconfig.get_paths()['purelib']\n"
    "out = {}\n"
    "for d, dirs, files in os.walk(root):\n"
    "    dirs[:] = [x for x in dirs if x != '__pycache__']\n"
    "    for f in files:\n"
    "        p = os.path.join(d, f)\n"
    "        if f.endswith('.pyc') or f == 'uv_cache.json' or not os.path.isfile(p) or os.path.islink(p):\n"
    "            continue\n"
    "        data = open(p, 'rb').read()\n"
    "        if f == 'RECORD':\n"
    "            data = b''.join(ln for ln in data.splitlines(True) if b'/uv_cache.json,' not in ln)\n"
    "        out[os.path.relpath(p, root)] = hashlib.sha256(data).hexdigest()\n"
    "print(json.dumps(out))\n"
)


def test_the_same_lock_builds_the_same_site_packages_on_a_second_machine_after_the_index_moved(  # type: ignore[no-untyped-def]
    docker_engine: Engine, second_daemon, second_engine: Engine, offline_base: str, mirror, example_copy: Any,
    stable_context: Any, tmp_path: Path,
) -> None:
    """#15's reproducibility: a lock made today, a newer release of a locked package published
    afterwards (a wheel folder the sources include), and ``--locked`` builds on two machines (the
    second daemon, an empty cache) that install byte-identical site-packages from the same base."""
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    from conftest import plant_wheel

    if not second_engine.image_exists(offline_base):  # the second machine gets this one's base as it is
        save = subprocess.Popen(["/usr/bin/docker", "save", offline_base], stdout=subprocess.PIPE)
        load = subprocess.run(["/usr/bin/docker", "load"], stdin=save.stdout, capture_output=True, text=True,
                              env={**os.environ, **second_daemon.env})
        save.wait()
        assert load.returncode == 0, load.stderr
    planted = tmp_path / "index"
    planted.mkdir()
    plant_wheel(planted, "0.1")
    spec = example_copy(tmp_path / "spec")
    spec.write_text(spec.read_text().replace('pip = ["six==1.16.0",', 'pip = ["kiln-planted>=0.1", "six==1.16.0",'))
    flags = [*source_flags(mirror.layer), "--find-links", str(planted)]
    r = kiln("lock", str(spec), "--base", offline_base, *flags)
    assert r.returncode == 0, r.stderr
    lock = read_lock(spec.with_suffix(".lock"))
    assert [w.version for w in lock.wheels if w.name == "kiln-planted"] == ["0.1"]
    plant_wheel(planted, "0.2")  # the index moved on after the lock

    tag = f"kiln-test/locked-repro:{os.getpid()}"
    sites = []
    try:
        for engine, env, ctx in ((docker_engine, {}, "locked-repro-1"), (second_engine, second_daemon.env,
                                                                         "locked-repro-2")):
            r = subprocess.run([sys.executable, "-m", "torchkiln", "build", str(spec), "--locked", "--base",
                                offline_base, "--tag", tag, "--context", str(stable_context(ctx)), *flags],
                               capture_output=True, text=True, timeout=1200, env={**os.environ, **env})
            assert r.returncode == 0, r.stderr
            assert engine.inspect_image(offline_base).id == lock.base.id  # the same base on both machines
            planted_version = engine.run(tag, ["python", "-c", "import kiln_planted; print(kiln_planted.VERSION)"])
            assert planted_version.stdout.strip() == "0.1"  # the locked one, not the newer release
            sites.append(json.loads(engine.run(tag, ["python", "-c", SITE_HASHES]).stdout))
        assert len(sites[0]) > 1000 and "torch/__init__.py" in sites[0]
        differ = sorted(k for k in sites[0].keys() | sites[1].keys() if sites[0].get(k) != sites[1].get(k))
        assert not differ, f"site-packages differ between the two machines: {differ[:20]}"

        # without the lock the newer release is what a resolve takes today
        r = kiln("lock", str(spec), "--base", offline_base, "--upgrade", *flags)
        assert r.returncode == 0, r.stderr
        assert [w.version for w in read_lock(spec.with_suffix(".lock")).wheels if w.name == "kiln-planted"] == ["0.2"]
    finally:
        docker_engine.remove_image(tag)
        second_engine.remove_image(tag)
