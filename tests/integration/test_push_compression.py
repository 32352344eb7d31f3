"""`kiln push --compression zstd|zstd:chunked` with the real engines: docker's image goes through podman.

The pushed image is the offline base every build here uses (`kiln-base:bookworm`, tagged under a name
of this test's own), so no build is needed; a plain-HTTP registry on 127.0.0.1 receives it (conftest's
``registry`` fixture). The registry's manifest must name zstd layers, the blobs must be zstd frames,
and podman must pull the image back; gzip (the default) is pushed too, to compare sizes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]

BASE = "kiln-base:bookworm"
ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchkiln", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture
def local_image() -> object:
    if shutil.which("docker") is None or shutil.which("podman") is None:
        pytest.skip("needs docker and podman")
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode != 0:
        pytest.skip(f"{BASE} is not in docker's store (kiln base bootstrap makes it)")
    ref = f"torchkiln/fleet-push-{os.getpid()}:1"
    subprocess.run(["docker", "tag", BASE, ref], check=True)
    yield ref
    subprocess.run(["docker", "rmi", ref], capture_output=True)


def test_zstd_and_zstd_chunked_through_podman(local_image: str, registry) -> None:  # type: ignore[no-untyped-def]
    repo = f"kiln-test/fleet-zstd-{os.getpid()}"
    sizes = {}
    for compression, tag in (("gzip", "gzip"), ("zstd:chunked", "chunked"), ("zstd", "zstd")):
        ref = registry.ref(f"{repo}:{tag}")
        r = kiln("push", local_image, "--to", ref, "--compression", compression, "--engine", "docker", "--json")
        subprocess.run(["docker", "rmi", ref], capture_output=True)  # push --to tagged it in docker's store
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["compression"] == compression
        _, manifest = registry.manifest(repo, tag)
        layers = manifest["layers"]
        sizes[compression] = sum(layer["size"] for layer in layers)
        if compression == "gzip":
            assert all(layer["mediaType"].endswith("gzip") for layer in layers)
            continue
        assert all(layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd" for layer in layers)
        assert registry.blob(repo, layers[0]["digest"])[:4] == ZSTD_MAGIC
        if compression == "zstd:chunked":  # the table of contents lazy pullers read is announced per layer
            # the table of contents lazy pullers read is announced per layer (pushed first of the zstd pair:
            # podman 4.3 has no --force-compression, and a later zstd push reuses this blob, a zstd frame too)
            assert all(any("zstd-chunked" in k for k in layer.get("annotations", {})) for layer in layers)
    # the image went into podman's store only for the push
    assert subprocess.run(["podman", "image", "exists", local_image]).returncode != 0
    # podman pulls it back from the registry
    ref = registry.ref(f"{repo}:zstd")
    pulled = subprocess.run(["podman", "pull", "--tls-verify=false", ref], capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    subprocess.run(["podman", "rmi", ref], capture_output=True)
    print(json.dumps({"compressed_layer_bytes": sizes}))  # kiln-base: gzip 45.0 MB, zstd:chunked 47.7 MB


def test_unknown_compression_is_a_usage_error(local_image: str) -> None:
    r = kiln("push", local_image, "--compression", "lz4")
    assert r.returncode == 2 and "--compression" in r.stderr
