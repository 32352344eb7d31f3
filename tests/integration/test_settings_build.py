"""#27 for real, with docker: settings that stick (the quick start's build → lock → build --locked with no
flags), and [[steps]] plus the app's entrypoint, port and health check in a built image."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import Mirror, context_dir, copy_example
from torchkiln.building.execute import BuildOptions, build_image
from torchkiln.cli import main
from torchkiln.engines import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _named(spec: Path, name: str) -> Path:
    text = spec.read_text()
    first = text.index('name = "') + len('name = "')
    spec.write_text(text[:first] + name + text[text.index('"', first):])
    return spec


def test_settings_make_build_lock_and_locked_build_work_as_printed(
    tmp_path: Path, docker_engine: Engine, offline_base: str, mirror: Mirror, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What scripts/quickstart.sh does: this machine's base and sources in the settings file, then the
    commands of the README with no extra flag, the lock's --locked build included."""
    monkeypatch.setenv("KILN_ENGINE", "docker")
    layer = mirror.layer
    assert main(["config", "set", "base", offline_base]) == 0
    for key, value in (("sources.index_url", layer.index_url), ("sources.torch_index", layer.torch_index),
                       ("sources.ca_bundle", layer.ca_bundle), ("sources.index_strategy", layer.index_strategy)):
        if value:
            assert main(["config", "set", key, value]) == 0
    for key, values in (("sources.extra_index_urls", layer.extra_index_urls), ("sources.find_links", layer.find_links)):
        if values:
            assert main(["config", "set", key, *values]) == 0
    name = f"kiln-test/settings-{uuid.uuid4().hex[:8]}"
    spec = _named(copy_example(tmp_path / "proj"), name)
    image = f"{name}:latest"
    try:
        capsys.readouterr()
        assert main(["build", str(spec), "--context", str(context_dir("settings-cpu"))]) == 0
        out = capsys.readouterr().out
        assert f"run it: kiln run {spec} -- python" in out
        assert main(["lock", str(spec)]) == 0
        out = capsys.readouterr().out
        assert f"base {offline_base}" in out and f"build it: kiln build {spec} --locked" in out
        assert main(["build", str(spec), "--locked", "--context", str(context_dir("settings-cpu"))]) == 0
        capsys.readouterr()
        assert main(["run", str(spec), "--no-interactive", "--", "python", "-c",
                     "import torch; print(torch.__version__)"]) == 0
        # the settings file is where every value came from
        assert main(["config", "--json", "--spec", str(spec)]) == 0
        by = {s["key"]: s for s in json.loads(capsys.readouterr().out)["settings"]}
        assert by["base"]["origin"] == "user" and by["engine"]["origin"] == "env"
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


def test_steps_entrypoint_port_and_health_check_in_a_built_image(
    tmp_path: Path, docker_engine: Engine, offline_base: str, mirror: Mirror, monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _named(copy_example(tmp_path / "proj", "cpu-steps.toml"), "kiln-test/steps")
    marker = f"kiln-secret-{uuid.uuid4().hex}"
    spec.write_text(spec.read_text() + (
        '\n[[steps]]\nafter = "app"\nname = "a build secret"\nsecrets = ["KILN_TEST_SECRET"]\n'
        # a secret is not part of BuildKit's cache key: the run's own text changes, so the step runs again
        f'run = "echo {uuid.uuid4().hex} >/dev/null && sha256sum /run/secrets/KILN_TEST_SECRET | cut -c1-64 '
        '> /opt/data/secret.sha256"\n'))
    spec.write_text(spec.read_text().replace('copy = ["apps/cpu_serve.py"]', 'copy = ["apps"]'))
    (tmp_path / "proj" / "apps" / ".env").write_text("TOKEN=never-in-the-context\n")
    (tmp_path / "proj" / ".dockerignore").write_text("**/.env\n")
    monkeypatch.setenv("KILN_TEST_SECRET", marker)
    tag = f"kiln-test/steps:{os.getpid()}"
    name = f"kiln-test-steps-{uuid.uuid4().hex[:8]}"
    summary = build_image(spec, docker_engine, BuildOptions(base=offline_base, flags=mirror.layer, tag=tag,
                                                            context_dir=context_dir("settings-steps")))
    try:
        assert summary.image == tag
        history = subprocess.run(["docker", "history", "--no-trunc", tag], capture_output=True, text=True).stdout
        config = subprocess.run(["docker", "inspect", tag], capture_output=True, text=True).stdout
        assert marker not in history and marker not in config
        subprocess.run(["docker", "run", "-d", "--name", name, tag], check=True, capture_output=True)
        status = ""
        for _ in range(40):
            status = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", name],
                                    capture_output=True, text=True).stdout.strip()
            if status == "healthy":
                break
            time.sleep(1)
        assert status == "healthy"
        r = subprocess.run(["docker", "exec", name, "sh", "-c",
                           "id -u; cat /opt/data/greeting.txt /opt/data/torch-version.txt /opt/data/secret.sha256; "
                           "python -c 'import six; print(six.__version__)'; "
                           "python -c \"import urllib.request; print(urllib.request.urlopen("
                           "'http://127.0.0.1:8000/').read().decode())\""],
                           capture_output=True, text=True)
        digest = hashlib.sha256(marker.encode()).hexdigest()
        assert r.stdout.split("\n")[:6] == ["1000", "hello", "2.13.0+cpu", digest, "1.16.0",
                                            "hello from torch 2.13.0+cpu"], r.stdout + r.stderr
        # kiln run SPEC -- CMD runs CMD (the [app] entrypoint is replaced), as the build's hint prints it
        assert main(["run", str(spec), "--tag", tag, "--no-interactive", "--", "python", "-c",
                     "import torch; print(torch.__version__)"]) == 0
        cfg = json.loads(config)[0]["Config"]
        assert cfg["Entrypoint"] == ["python", "apps/cpu_serve.py"] and cfg["Cmd"] == ["--port", "8000"]
        assert "8000/tcp" in cfg["ExposedPorts"]
        copied = context_dir("settings-steps") / "apps"
        assert (copied / "cpu_serve.py").is_file() and not (copied / ".env").exists()
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
