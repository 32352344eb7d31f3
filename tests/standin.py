"""Stand-ins for NGC's PyTorch image, built with the real engine (no registry is reachable here).

An NGC image keeps torch in the system Python's ``/usr/local/lib/python3.X/dist-packages`` (no venv),
ships ``/etc/pip/constraint.txt`` (the versions it was built with, torch among them) and sets
``NVIDIA_PYTORCH_VERSION``, ``PYTORCH_VERSION``, ``PYTORCH_BUILD_VERSION`` and
``PIP_CONSTRAINT=/etc/pip/constraint.txt``. The stand-in is the same on top of an offline base:
a real torch wheel set from the configured mirror (``pip download``, i.e. pip's own configuration),
installed the same way. ``kiln-test/...`` tags only; the test removes nothing it did not tag.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from torchkiln.building.context import find_uv
from torchkiln.engines import Engine

DOCKERFILE = """\
FROM {base}
RUN --mount=type=bind,source=wheels,target=/w --mount=type=bind,source=uv,target=/uv \\
    /uv pip install --python /usr/bin/python3 --system --break-system-packages --no-index --find-links /w {torch} \\
    && mkdir -p /etc/pip \\
    && /uv pip freeze --python /usr/bin/python3 --system > /etc/pip/constraint.txt \\
    && echo '{extra_pin}' >> /etc/pip/constraint.txt
ENV NVIDIA_PYTORCH_VERSION={ngc} \\
    PYTORCH_VERSION={version} \\
    PYTORCH_BUILD_VERSION={version} \\
    PIP_CONSTRAINT=/etc/pip/constraint.txt
LABEL com.nvidia.pytorch.version={version}
"""


def download(requirements: list[str], dest: Path, python: str = "3.11") -> list[Path]:
    """The wheels of ``requirements`` and their dependencies from pip's configured sources."""
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", python,
         "--platform", "manylinux_2_28_x86_64", "-d", str(dest), *requirements],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise LookupError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "pip download failed")
    return sorted(dest.glob("*.whl"))


def build_standin(engine: Engine, base: str, tag: str, context: Path, torch: str, *, ngc: str = "25.12",
                  extra: list[str] = ()) -> str:  # type: ignore[assignment]
    """Build (or find) the stand-in image ``tag``; returns its tag.

    ``extra``: more requirements whose wheels are downloaded into the context (not installed): the
    first one is pinned in the constraints file, as NGC pins what its image was tested with.
    """
    if engine.image_exists(tag):
        return tag
    wheels = download([torch, *extra], context / "wheels")
    pin = ""
    if extra:
        name = re.split(r"[<>=!~ ]", extra[0])[0].lower()
        found = [w for w in wheels if w.name.lower().startswith(name + "-")]
        pin = f"{name}=={found[0].name.split('-')[1]}" if found else ""
        for w in found:  # the package stays out of the image: the kiln build installs it
            w.unlink()
    shutil.copy2(find_uv(), context / "uv")
    version = torch.split("==", 1)[1]
    (context / "Dockerfile").write_text(
        DOCKERFILE.format(base=base, torch=torch, extra_pin=pin, ngc=ngc, version=version))
    engine.runner.run([engine.info.binary, "build", "-q", "-t", tag, str(context)], what=f"build {tag}",
                      env={"DOCKER_BUILDKIT": "1"})
    return tag
