"""`kiln push --compression estargz` against a real registry (Debian's docker-registry on 127.0.0.1),
and the missing-tool errors of every non-gzip compression (zstd: test_push_compression.py).

What reaches the registry is read back with ``skopeo inspect --raw``: each layer's media type and the
table-of-contents annotation the stargz snapshotter needs. With ``--first-run`` (a record written by
hand: the base image has no torch to record a run of), the layer blob itself is read back: the files
the record names come first, before the ``.prefetch.landmark`` entry. The image pushed is the offline base (one
117 MB layer) so the conversion stays short; it runs the real tools (ctr-remote in a namespace of the
local containerd, skopeo).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from torchkiln.errors import ExitCode

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def kiln(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchkiln", *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=1200)


def raw_manifest(ref: str) -> dict:  # type: ignore[type-arg]
    r = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{ref}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("compression", "media_type", "annotations"),
    [
        ("estargz", "application/vnd.oci.image.layer.v1.tar+gzip", {"containerd.io/snapshot/stargz/toc.digest"}),
    ],
)
def test_push_writes_the_asked_compression(offline_base: str, registry, compression: str, media_type: str,  # type: ignore[no-untyped-def]
                                           annotations: set[str]) -> None:
    for tool in ("skopeo", "ctr-remote"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    repo, tag = "kiln-test/pull-estargz", compression.replace(":", "-") + f"-{os.getpid()}"
    ref = registry.ref(f"{repo}:{tag}")
    try:
        r = kiln("push", offline_base, "--to", ref, "--compression", compression, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["compression"] == compression and out["image"] == ref
        assert out["digest"] == registry.manifest_digest(repo, tag)  # what skopeo pushed is what the tag names
        manifest = raw_manifest(ref)
        assert manifest["layers"], manifest
        for layer in manifest["layers"]:
            assert layer["mediaType"] == media_type
            assert annotations <= set(layer.get("annotations", {})), layer
        # the converted image still runs: podman pulls it (eStargz is plain gzip to a non-lazy runtime)
        if shutil.which("podman"):
            from torchkiln.engines.podman import explicit_ulimits  # this host's rlimits, as kiln run passes them

            run = subprocess.run(["podman", "run", "--rm", "--tls-verify=false", *explicit_ulimits(), ref,
                                  "python3", "-c", "print(6*7)"], capture_output=True, text=True, timeout=600)
            assert run.stdout.strip() == "42", run.stderr
            subprocess.run(["podman", "rmi", "-f", ref], capture_output=True)
    finally:
        subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)


def test_a_missing_tool_is_exit_11_before_anything_runs(offline_base: str, registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bin_dir = tmp_path / "bin"  # a PATH with the engine and nothing else
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to("/usr/bin/docker")
    ref = registry.ref(f"kiln-test/pull-missing:{os.getpid()}")
    for compression, package in (("zstd", "podman"), ("estargz", "stargz-snapshotter")):
        r = kiln("push", offline_base, "--to", ref, "--compression", compression, "--engine", "docker",
                 env={"PATH": str(bin_dir)})
        assert r.returncode == ExitCode.TOOL_MISSING, r.stderr
        assert f"apt-get install -y {package}" in r.stderr and "Traceback" not in r.stderr
        assert registry.tags("kiln-test/pull-missing") == []  # nothing pushed


def test_push_places_the_first_run_files_first(offline_base: str, registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for tool in ("skopeo", "ctr-remote"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    from torchkiln.verify.record import write_record

    # regular files of the base image, none of them near the front of its layer as docker wrote it
    first = ["/usr/lib/os-release", "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    record = write_record(tmp_path / "first-run.json", [*first, "/not/in/this/image.so"])
    repo, tag = "kiln-test/push-first-run", f"estargz-{os.getpid()}"
    ref = registry.ref(f"{repo}:{tag}")
    try:
        r = kiln("push", offline_base, "--to", ref, "--compression", "estargz", "--first-run", str(record), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["first_run"] == {"record": str(record), "files": 4}
        manifest = raw_manifest(ref)
        assert len(manifest["layers"]) == 1, manifest  # the offline base is one layer
        layer = manifest["layers"][0]
        assert "containerd.io/snapshot/stargz/toc.digest" in layer.get("annotations", {})
        blob = registry.blob(repo, layer["digest"])
        entries: list[tuple[str, bool]] = []  # (name, is a folder) up to the landmark
        # eStargz is plain tar.gz to a reader, of many gzip members (gzip reads them all; tarfile's own "r|gz" one)
        with tarfile.open(fileobj=gzip.GzipFile(fileobj=io.BytesIO(blob)), mode="r|") as tar:
            for member in tar:
                name = member.name.removeprefix("./").lstrip("/")
                entries.append((name, member.isdir()))
                if name == ".prefetch.landmark":
                    break
        assert entries[-1][0] == ".prefetch.landmark", entries[-20:]  # the landmark ends the prefetched part
        before = entries[:-1]
        # exactly the recorded files (in the record's order) and the folders above them: nothing else
        assert [n for n, is_dir in before if not is_dir] == [f.lstrip("/") for f in first], before
        folders = {n for n, is_dir in before if is_dir}
        assert folders <= {".", "usr", "usr/lib", "usr/bin", "usr/lib/x86_64-linux-gnu"}, folders
    finally:
        subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)
