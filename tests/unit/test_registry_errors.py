"""Registry failures of a push become typed errors with their own exit codes (pure: recorded output)."""

from __future__ import annotations

from torchkiln.engines.engine import pushed_digest, registry_failure, registry_of
from torchkiln.errors import ExitCode, RegistryAuthError, RegistryError
from torchkiln.runner import Completed

DIGEST = "sha256:" + "ab" * 32


def _failed(output: str) -> Completed:
    return Completed(("/usr/bin/docker", "push", "127.0.0.1:5000/a/b:1"), 1, "", output, 0.1)


def test_registry_of_a_reference() -> None:
    assert registry_of("127.0.0.1:5000/team/app:1") == "127.0.0.1:5000"
    assert registry_of("localhost/app") == "localhost"
    assert registry_of("ghcr.io/org/app:1") == "ghcr.io"
    assert registry_of("torchkiln/example-cpu:latest") == "docker.io"
    assert registry_of("python:3.11") == "docker.io"


def test_the_pushed_digest_is_read_from_the_engine_output() -> None:
    out = f"The push refers to repository [x]\nabc: Pushed\n1: digest: {DIGEST} size: 1573\n"
    assert pushed_digest(out) == DIGEST
    assert pushed_digest("nothing here") == ""


def test_refused_credentials_are_an_auth_error() -> None:
    for text in ("unauthorized: authentication required", "no basic auth credentials",
                 "denied: requested access to the resource is denied"):
        e = registry_failure("docker", "127.0.0.1:5000/a/b:1", _failed(text))
        assert isinstance(e, RegistryAuthError) and e.exit_code == ExitCode.REGISTRY_AUTH
        assert "docker login 127.0.0.1:5000" in (e.hint or "")


def test_an_unreachable_or_untrusted_registry_is_a_registry_error() -> None:
    down = registry_failure("docker", "127.0.0.1:5000/a/b:1", _failed(
        'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused'))
    assert isinstance(down, RegistryError) and down.exit_code == ExitCode.REGISTRY
    assert "cannot be reached" in down.message
    tls = registry_failure("podman", "reg.example:443/a:1", _failed("x509: certificate signed by unknown authority"))
    assert isinstance(tls, RegistryError) and "certs.d/reg.example:443/ca.crt" in (tls.hint or "")


def test_other_push_failures_are_left_to_the_generic_error() -> None:
    assert registry_failure("docker", "a:1", _failed("An image does not exist locally with the tag: a")) is None
