"""Pushes against a real registry (plain HTTP, and TLS behind htpasswd) and a second Docker daemon.

The registries (plain HTTP; TLS with a throwaway CA behind htpasswd) and the second daemon (an
empty cache: a second CI machine) are started by the fixtures in ``conftest.py`` (see
``tests/services.py``). The CPU image the session builds once (``cpu_build``) is what is pushed, so
these tests add pushes, not builds of their own.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from conftest import REGISTRY_PASSWORD_MARKER, source_flags
from torchkiln.engines import Engine
from torchkiln.errors import ExitCode

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def kiln(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (its own process, the environment's engine login)."""
    return subprocess.run([sys.executable, "-m", "torchkiln", *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=1200)


def docker_config(tmp: Path, auths: dict[str, str] | None = None) -> dict[str, str]:
    """A private client configuration (DOCKER_CONFIG) holding ``auths`` (registry → "user:password")."""
    tmp.mkdir(parents=True, exist_ok=True)
    entries = {host: {"auth": base64.b64encode(cred.encode()).decode()} for host, cred in (auths or {}).items()}
    (tmp / "config.json").write_text(json.dumps({"auths": entries}))
    return {"DOCKER_CONFIG": str(tmp)}


def test_push_then_pull_and_run_on_a_second_machine(cpu_build, registry, second_engine: Engine) -> None:  # type: ignore[no-untyped-def]
    tag = f"push-{os.getpid()}"
    ref = registry.ref(f"kiln-test/example-cpu:{tag}")
    r = kiln("push", cpu_build.ref, "--to", ref, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["image"] == ref and out["source"] == cpu_build.ref
    _, manifest = registry.manifest("kiln-test/example-cpu", tag)
    assert out["digest"] == registry.manifest_digest("kiln-test/example-cpu", tag)
    assert len(manifest["layers"]) == cpu_build.summary.layers  # type: ignore[arg-type]

    assert second_engine.pull(ref), f"the second daemon could not pull {ref}"
    run = second_engine.run(ref, ["python", "-c", "import torch, six; print(torch.__version__, six.__version__)"])
    assert run.stdout.split() == ["2.13.0+cpu", "1.16.0"]
    subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)  # the tag kiln push --to made


def test_credentials_come_from_the_engine_login_only(cpu_build, secure_registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reg = secure_registry
    repo, tag = "kiln-test/private-cpu", f"auth-{os.getpid()}"
    ref = reg.ref(f"{repo}:{tag}")
    outputs: list[str] = []

    # no login at all: refused (exit 11), and no tag appears
    r = kiln("push", cpu_build.ref, "--to", ref, env=docker_config(tmp_path / "none"))
    outputs += [r.stdout, r.stderr]
    assert r.returncode == ExitCode.REGISTRY_AUTH, r.stderr
    assert "login" in r.stderr and reg.host in r.stderr and "Traceback" not in r.stderr
    # wrong password stored by an earlier login: refused the same way
    r = kiln("push", cpu_build.ref, "--to", ref, "--json",
             env=docker_config(tmp_path / "wrong", {reg.host: f"{reg.user}:not-{reg.password}"}))
    outputs += [r.stdout, r.stderr]
    assert r.returncode == ExitCode.REGISTRY_AUTH
    assert json.loads(r.stdout)["error"] == "RegistryAuthError"
    assert reg.tags(repo) == []  # nothing pushed half-way: no tag for the refused pushes

    # the engine's own login (TLS: the daemon trusts the throwaway CA through certs.d)
    env = docker_config(tmp_path / "good")
    login = subprocess.run(["/usr/bin/docker", "login", "-u", reg.user, "--password-stdin", reg.host],
                           input=reg.password, env={**os.environ, **env}, capture_output=True, text=True)
    assert login.returncode == 0, login.stderr
    r = kiln("push", cpu_build.ref, "--to", ref, "--json", env=env)
    outputs += [r.stdout, r.stderr]
    assert r.returncode == 0, r.stderr
    assert reg.tags(repo) == [tag]
    assert json.loads(r.stdout)["digest"] == reg.manifest_digest(repo, tag)

    # the planted password is in no output, and in no blob of the pushed image (config: labels, history)
    for text in outputs:
        assert REGISTRY_PASSWORD_MARKER not in text and reg.password not in text
    _, manifest = reg.manifest(repo, tag)
    blobs = [manifest["config"], *manifest["layers"]]  # type: ignore[list-item]
    for blob in blobs:
        data = reg.blob(repo, blob["digest"])
        if blob["mediaType"].endswith("gzip"):
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        assert REGISTRY_PASSWORD_MARKER.encode() not in data, f"the registry password is in {blob['digest']}"
        assert cpu_build.ca_marker.encode() not in data, f"the CA is in {blob['digest']}"
    subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)  # the tag kiln push --to made


def test_an_unreachable_registry_is_a_clear_error(cpu_build) -> None:  # type: ignore[no-untyped-def]
    from services import free_port

    ref = f"127.0.0.1:{free_port()}/kiln-test/nowhere:1"  # nothing listens there
    r = kiln("push", cpu_build.ref, "--to", ref)
    assert r.returncode == ExitCode.REGISTRY, r.stderr
    assert "cannot be reached" in r.stderr and "Traceback" not in r.stderr
    subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)


# -- kiln build --push / --cache-to: the same registry errors after a (cached) build ----------------------


def build_args(cpu_build, ref: str, *extra: str) -> list[str]:  # type: ignore[no-untyped-def]
    """`kiln build` of the session's CPU image as the CLI runs it (the same context: every step cached)."""
    o = cpu_build.options
    return ["build", str(cpu_build.spec), "--base", o.base, "--tag", ref, "--context", str(o.context_dir),
            *source_flags(o.flags), *extra]


def test_build_push_to_an_unreachable_registry_is_exit_12(cpu_build) -> None:  # type: ignore[no-untyped-def]
    from services import free_port

    ref = f"127.0.0.1:{free_port()}/kiln-test/nowhere:build"  # nothing listens there
    try:
        r = kiln(*build_args(cpu_build, ref, "--push"))
        assert r.returncode == ExitCode.REGISTRY, r.stderr
        assert "cannot be reached" in r.stderr and ref.split("/")[0] in r.stderr and "Traceback" not in r.stderr
        cache = f"127.0.0.1:{free_port()}/kiln-test/nowhere:cache"
        r = kiln(*build_args(cpu_build, ref, "--cache-to", cache, "--json"))
        assert r.returncode == ExitCode.REGISTRY, r.stderr
        assert json.loads(r.stdout)["error"] == "RegistryError"
    finally:
        subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)
        subprocess.run(["/usr/bin/docker", "rmi", cache], capture_output=True)


def test_build_push_with_bad_credentials_is_exit_13_and_shows_no_secret(  # type: ignore[no-untyped-def]
    cpu_build, secure_registry, tmp_path: Path,
) -> None:
    reg = secure_registry
    repo = "kiln-test/build-push"
    ref = reg.ref(f"{repo}:bad-{os.getpid()}")
    env = docker_config(tmp_path / "wrong", {reg.host: f"{reg.user}:not-{reg.password}"})
    outputs: list[str] = []
    try:
        r = kiln(*build_args(cpu_build, ref, "--push"), env=env)
        outputs += [r.stdout, r.stderr]
        assert r.returncode == ExitCode.REGISTRY_AUTH, r.stderr
        assert "refused" in r.stderr and f"docker login {reg.host}" in r.stderr and "Traceback" not in r.stderr
        r = kiln("--debug", *build_args(cpu_build, ref, "--push", "--json"), env=env)  # echoes every command
        outputs += [r.stdout, r.stderr]
        assert r.returncode == ExitCode.REGISTRY_AUTH
        assert json.loads(r.stdout)["error"] == "RegistryAuthError"
        assert reg.tags(repo) == []  # nothing pushed half-way
        for text in outputs:  # neither the stored password nor its base64 form, even with --debug
            assert REGISTRY_PASSWORD_MARKER not in text and reg.password not in text
            assert base64.b64encode(f"{reg.user}:not-{reg.password}".encode()).decode() not in text
    finally:
        subprocess.run(["/usr/bin/docker", "rmi", ref], capture_output=True)
