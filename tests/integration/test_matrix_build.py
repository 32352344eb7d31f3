"""`kiln build --matrix` with real engines: two Docker daemons (this machine's, reached as the docker
context ``default``, and the test's second daemon, reached through a docker context of its own) and
the real registry. Where openssl is there (CI), the context reaches the second daemon over
``tcp://127.0.0.1`` with mutual TLS (a throwaway CA, a client certificate), as a remote builder is.

Three CPU cells on the offline base differ in one pip package each. The middle one names
``kiln-planted==0.1``, a wheel that is not in its wheel folder yet: that cell fails, the other two
are built on the two daemons, pushed, and run ``import torch``; the exit code and the summary name
the failed cell with its log tail. Then the wheel is planted and the same command runs again: only
the failed cell is rebuilt. The torch layer is the expensive step (one per daemon); the session's
other builds of the CPU example have usually put it in the first daemon's cache already.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import plant_wheel
from torchkiln.engines import Engine
from torchkiln.errors import ExitCode

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(1800)]


def kiln(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchkiln", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=1500)


def source_flags(mirror, planted: Path) -> list[str]:  # type: ignore[no-untyped-def]
    layer = mirror.layer
    flags = [f"--find-links={x}" for x in (*layer.find_links, str(planted))]
    flags += [f"--extra-index-url={x}" for x in layer.extra_index_urls]
    if layer.index_url:
        flags.append(f"--index-url={layer.index_url}")
    if layer.ca_bundle:
        flags.append(f"--ca-bundle={layer.ca_bundle}")
    return flags


def test_matrix_across_two_daemons_push_fail_and_rerun_only_the_failed_cell(  # type: ignore[no-untyped-def]
    docker_engine: Engine, second_daemon, second_engine: Engine, offline_base: str, mirror, registry,
    stable_context, tmp_path: Path,
) -> None:
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    if not second_engine.image_exists(offline_base):  # the second machine has no base yet: load this one's
        save = subprocess.Popen(["/usr/bin/docker", "save", offline_base], stdout=subprocess.PIPE)
        load = subprocess.run(["/usr/bin/docker", "load"], stdin=save.stdout, env={**os.environ, **second_daemon.env},
                              capture_output=True, text=True)
        save.wait()
        assert load.returncode == 0, load.stderr
    # a private client configuration holding a docker context for the second daemon
    config = tmp_path / "docker-config"
    config.mkdir()
    env = {"DOCKER_CONFIG": str(config), "KILN_CACHE_DIR": str(stable_context("matrix-cache")), "CI": "1"}
    # over tcp with mutual TLS where the fixture made a listener (a remote builder); else its socket
    endpoint = f"host={second_daemon.host}"
    if second_daemon.tls_host:
        endpoint = ",".join([f"host={second_daemon.tls_host}",
                             *(f"{k}={v}" for k, v in second_daemon.tls_files.items())])
        plain = subprocess.run(["/usr/bin/docker", "-H", second_daemon.tls_host, "version"], capture_output=True,
                               text=True)
        assert plain.returncode != 0  # the listener takes TLS clients with a certificate only
    ctx = subprocess.run(["/usr/bin/docker", "context", "create", "kiln-test-second", "--docker", endpoint],
                         env={**os.environ, **env}, capture_output=True, text=True)
    assert ctx.returncode == 0, ctx.stderr
    shutil.rmtree(Path(env["KILN_CACHE_DIR"]) / "matrix", ignore_errors=True)  # no record of earlier runs

    repo = f"kiln-test/matrix-{os.getpid()}"
    planted = tmp_path / "planted"
    planted.mkdir()
    spec = tmp_path / "spec" / "kiln.toml"
    spec.parent.mkdir()
    spec.write_text(f"""\
[image]
name = "{registry.ref(repo)}"
[torch]
version = "2.13.0"
cuda = "cpu"
[base]
image = "{offline_base}"
[matrix]
pip = [["six==1.17.0"], ["kiln-planted==0.1"], ["idna==3.20"]]
""")
    args = ["build", str(spec), "--matrix", "--builders", "default,kiln-test-second", "--push",
            *source_flags(mirror, planted)]
    tags = {1: "torch2.13.0-cpu-py3.11-pip-six1.17.0", 2: "torch2.13.0-cpu-py3.11-pip-kiln-planted0.1",
            3: "torch2.13.0-cpu-py3.11-pip-idna3.20"}
    refs = {i: f"{registry.ref(repo)}:{t}" for i, t in tags.items()}
    engines = {"default": docker_engine, "kiln-test-second": second_engine}
    try:
        # 1: the planted package is missing: cell 2 fails, cells 1 and 3 are built on both daemons and pushed
        r = kiln(*args, "--json", env=env)
        assert r.returncode == ExitCode.BUILD, r.stderr
        assert "cell 2 (pip=[kiln-planted==0.1])" in r.stderr and "Traceback" not in r.stderr
        out = json.loads(r.stdout)
        cells = {c["cell"]: c for c in out["cells"]}
        assert {i: c["status"] for i, c in cells.items()} == {1: "built", 2: "failed", 3: "built"}
        assert out["failed"] == [2] and "kiln-planted" in cells[2]["error"]["log_tail"]
        assert {cells[1]["builder"], cells[3]["builder"]} == {"default", "kiln-test-second"}
        assert cells[1]["pushed"] and cells[3]["pushed"]
        assert sorted(registry.tags(repo)) == sorted([tags[1], tags[3]])
        for i, package in ((1, "six"), (3, "idna")):
            run = engines[cells[i]["builder"]].run(refs[i], ["python", "-c", f"import torch, {package}; "
                                                             f"print(torch.__version__, {package}.__version__)"])
            assert run.stdout.split() == ["2.13.0+cpu", "1.17.0" if package == "six" else "3.20"]
            labels = engines[cells[i]["builder"]].inspect_image(refs[i]).labels
            assert labels["org.opencontainers.image.version"] == tags[i], labels  # provenance, as kiln build
            assert labels["org.opencontainers.image.base.name"] and labels["org.opencontainers.image.created"]
        # every built image is the one the registry holds
        for i in (1, 3):
            assert registry.manifest_digest(repo, tags[i])

        # 2: the wheel is there now: the same command rebuilds only cell 2
        plant_wheel(planted)
        r = kiln(*args, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "building 1 of 3 cells" in r.stderr and "2 already built: skipped" in r.stderr
        summary = r.stdout
        assert summary.count("skipped") == 2 and "built + pushed" in summary
        assert sorted(registry.tags(repo)) == sorted(tags.values())
        holder = next(e for e in engines.values() if e.image_exists(refs[2]))
        run = holder.run(refs[2], ["python", "-c", "import torch, kiln_planted; "
                                                   "print(torch.__version__, kiln_planted.VERSION)"])
        assert run.stdout.split() == ["2.13.0+cpu", "0.1"]
    finally:
        for ref in refs.values():
            for e in engines.values():
                e.remove_image(ref)


def test_bad_builders_are_clear_errors_before_anything_builds(docker_engine: Engine, tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "kiln-test/matrix-bad"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    '[matrix]\npython = ["3.11", "3.12"]\n')
    env = {"KILN_CACHE_DIR": str(tmp_path / "cache")}
    nowhere = f"unix://{tmp_path}/no-daemon.sock"
    r = kiln("build", str(spec), "--matrix", "--builders", f"default,{nowhere}", env=env)
    assert r.returncode == ExitCode.ENGINE_MISSING, r.stderr
    assert f"the builder {nowhere} cannot be used" in r.stderr and "Traceback" not in r.stderr
    r = kiln("build", str(spec), "--matrix", "--builders", "default,unix:///var/run/docker.sock", env=env)
    assert r.returncode == ExitCode.INPUT and "are the same Docker daemon" in r.stderr
    r = kiln("build", str(spec), "--matrix", "--builders", "no-such-context", env=env)
    assert r.returncode == ExitCode.INPUT and "is not a docker context" in r.stderr
    r = kiln("build", str(spec), "--matrix", env=env)
    assert r.returncode == ExitCode.INPUT and "needs at least one builder" in r.stderr
    assert not (tmp_path / "cache" / "matrix").exists()  # nothing was built, so nothing was recorded


def test_cells_that_differ_only_by_platform_become_one_manifest_list_on_the_registry(  # type: ignore[no-untyped-def]
    docker_engine: Engine, registry, tmp_path: Path,
) -> None:
    """``push_manifests`` against the real registry: an amd64 and an arm64 cell, one manifest list.

    The two cells' images are tiny stand-ins (``FROM scratch`` built with ``--platform``: the config
    says the platform, no emulation needed); the manifest code is what ``kiln build --matrix --push``
    runs after its cells are pushed.
    """
    from torchkiln.building.invocation import BuildOptions
    from torchkiln.building.matrix import CellRun, plan_cell, push_manifests
    from torchkiln.knowledge import load_knowledge
    from torchkiln.matrix import cell_tags, expand, resolve_matrix
    from torchkiln.runner import Runner
    from torchkiln.spec import parse_spec

    repo = f"kiln-test/mlist-{os.getpid()}"
    spec = parse_spec({"image": {"name": registry.ref(repo)}, "torch": {"version": "2.13.0", "cuda": "cpu"},
                       "matrix": {"platform": ["linux/amd64", "linux/arm64"]}})
    cells = cell_tags(spec, resolve_matrix(expand(spec), load_knowledge()))
    planned = [plan_cell(c, tmp_path, BuildOptions(), docker_engine, cwd=tmp_path, group=0,
                         env={}) for c in cells]
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY hello /hello\n")
    binary = docker_engine.info.binary
    images = [p.rc.image for p in planned]
    try:
        for p in planned:
            assert p.rc.plan is not None
            (ctx / "hello").write_text(p.rc.plan.platform)
            for argv in ([binary, "build", "--platform", p.rc.plan.platform, "-t", p.rc.image, str(ctx)],
                         [binary, "push", p.rc.image]):
                r = subprocess.run(argv, env={**os.environ, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True)
                assert r.returncode == 0, r.stderr
        runs = [CellRun(p, "default", status="built") for p in planned]
        (result,) = push_manifests(runs, Runner(), binary)
        assert result.status == "pushed", result.reason
        assert result.ref == registry.ref(repo) + ":torch2.13.0-cpu-py3.11"
        found = registry.manifest(repo, "torch2.13.0-cpu-py3.11")
        assert found is not None
        media, manifest = found
        assert media in ("application/vnd.docker.distribution.manifest.list.v2+json",
                         "application/vnd.oci.image.index.v1+json"), media
        entries = manifest["manifests"]
        assert isinstance(entries, list)
        assert sorted((e["platform"]["os"], e["platform"]["architecture"]) for e in entries) == [
            ("linux", "amd64"), ("linux", "arm64")]
        # each entry is the image pushed for that cell
        for e, image in zip(sorted(entries, key=lambda e: e["platform"]["architecture"]), images, strict=True):
            assert e["digest"] == registry.manifest_digest(repo, image.rsplit(":", 1)[1])
    finally:
        subprocess.run([binary, "rmi", *images], capture_output=True)
