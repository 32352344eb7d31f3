"""The pure parts of `kiln push --compression` (engines/compress.py): which tools, which TLS flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchkiln.engines import compress
from torchkiln.engines.engine import is_loopback
from torchkiln.errors import ExitCode, ToolMissingError


@pytest.mark.parametrize(("registry", "loopback"), [
    ("127.0.0.1:5000", True), ("localhost:5000", True), ("localhost", True), ("[::1]:5000", True),
    ("127.3.2.1", True), ("registry.example.com:5000", False), ("10.0.0.1:5000", False), ("docker.io", False),
])
def test_only_loopback_registries_are_reached_over_plain_http(registry: str, loopback: bool) -> None:
    assert is_loopback(registry) is loopback
    flags = compress.skopeo_dest_flags(f"{registry}/team/app:1")
    assert flags == (["--dest-tls-verify=false"] if loopback else [])


def test_the_tools_each_engine_needs() -> None:
    assert compress.required_tools("docker", "gzip") == () == compress.required_tools("podman", "gzip")
    for fmt in ("zstd", "zstd:chunked"):  # podman push --compression-format; docker's image goes through podman
        assert compress.required_tools("podman", fmt) == ()
        assert compress.required_tools("docker", fmt) == ("podman",)
    for engine in ("docker", "podman"):
        assert compress.required_tools(engine, "estargz") == ("ctr-remote", "skopeo")
    assert set(compress.COMPRESSIONS) == {"gzip", "zstd", "zstd:chunked", "estargz"}


def test_a_missing_tool_names_its_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError) as e:
        compress.check_tools("docker", "estargz")
    assert e.value.exit_code == ExitCode.TOOL_MISSING
    assert "apt-get install -y stargz-snapshotter skopeo" in str(e.value.hint)
    compress.check_tools("docker", "gzip")  # needs nothing


def test_a_missing_containerd_socket_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for tool in ("skopeo", "ctr-remote"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    env = {"CONTAINERD_ADDRESS": str(tmp_path / "nowhere.sock")}
    assert compress.containerd_address(env) == env["CONTAINERD_ADDRESS"]
    monkeypatch.setenv("CONTAINERD_ADDRESS", env["CONTAINERD_ADDRESS"])
    with pytest.raises(ToolMissingError, match="nowhere.sock"):
        compress.check_tools("docker", "estargz")
