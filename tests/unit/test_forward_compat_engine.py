"""The [gpu] forward_compat entrypoint in a real container (docker): as the rendered runtime stage installs it
(COPY --chmod, ENTRYPOINT, a non-root user), it puts the compat libraries first only on an older host driver
and runs the command it is given. The driver's version file is a stand-in (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from torchkiln.engines import Engine
from torchkiln.resolve.compat import COMPAT_DIR, ENTRYPOINT, entrypoint_script

pytestmark = pytest.mark.engine


def test_entrypoint_in_a_container(docker_engine: Engine, offline_base: str, tmp_path: Path) -> None:
    docker = docker_engine.info.binary  # the client the engine checked (BuildKit-capable)
    (tmp_path / ".kiln").mkdir()
    (tmp_path / ".kiln" / "cuda-compat.sh").write_text(entrypoint_script("13.0"))
    (tmp_path / "Dockerfile").write_text(
        f"FROM {offline_base}\n"
        f"RUN mkdir -p {COMPAT_DIR} && touch {COMPAT_DIR}/libcuda.so.580.65.06 {COMPAT_DIR}/libcuda.so.1 \\\n"
        "    && printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat\\n' > /opt/old \\\n"
        "    && printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.44.01  Release\\n' > /opt/new\n"
        f"COPY --chmod=0755 .kiln/cuda-compat.sh {ENTRYPOINT}\n"
        f'ENTRYPOINT ["{ENTRYPOINT}"]\n'
        "USER 1000:1000\n"
        'CMD ["sh", "-c", "echo \\"LD=$LD_LIBRARY_PATH\\""]\n')
    tag = f"kiln-test/facts-compat:{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    subprocess.run([docker, "build", "-q", "-t", tag, str(tmp_path)], check=True, capture_output=True, env=env)
    try:
        def run(version_file: str) -> str:
            out = subprocess.run([docker, "run", "--rm", "-e", f"KILN_DRIVER_VERSION_FILE={version_file}", tag],
                                 check=True, capture_output=True, text=True)
            return out.stdout.strip()

        assert run("/opt/old") == f"LD={COMPAT_DIR}"  # R535 host: the compat libcuda of 580.65.06 first
        assert run("/opt/new") == "LD="  # a newer host driver is never shadowed
        assert run("/proc/driver/nvidia/version") == "LD="  # no GPU driver: nothing changes
    finally:
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True, check=False)
