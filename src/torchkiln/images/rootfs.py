"""A root-filesystem tar as a one-layer docker-archive, with the platform written into its config.

``docker import --platform`` records the platform only on an experimental daemon (Docker 20.10
silently records the host's), so ``kiln base bootstrap --platform linux/arm64`` writes the image
itself: ``manifest.json``, the image config (``architecture``, ``os``, ``variant``, ``Env``,
``Cmd``, ``Labels``, the layer's diff id) and the tar as the one layer, which ``docker load`` and
``podman load`` read as they are. The format is the one ``docker save`` writes (Docker's image spec
v1.2); a few lines of our own, since no maintained library writes it without a daemon.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info


def image_config(
    diff_id: str,
    platform: str,
    *,
    env: Sequence[str] = (),
    cmd: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    created: str | None = None,
    comment: str = "",
) -> dict[str, object]:
    """The image config of a one-layer image of ``platform`` ("linux/arm64", "linux/arm/v7")."""
    os_, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    if arch == "arm64" and not variant:
        variant = "v8"  # what registries and docker record for linux/arm64
    when = created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    config: dict[str, object] = {
        "architecture": arch,
        "os": os_,
        "created": when,
        "config": {"Env": list(env), "Cmd": list(cmd), "Labels": dict(labels or {})},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": when, "created_by": comment or "torchkiln: root filesystem"}],
    }
    if variant:
        config["variant"] = variant
    return config


def write_docker_archive(
    rootfs: Path,
    dest: Path,
    tag: str,
    platform: str,
    *,
    env: Sequence[str] = (),
    cmd: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    comment: str = "",
) -> Path:
    """Write ``dest``: a docker-archive holding ``rootfs`` (an uncompressed tar) as the one layer of
    ``tag``. Written to a temporary file beside ``dest`` and moved into place when whole."""
    diff_id = _sha256(rootfs)
    config = json.dumps(
        image_config(diff_id, platform, env=env, cmd=cmd, labels=labels, comment=comment), sort_keys=True
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = f"{diff_id}/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            folder = tarfile.TarInfo(diff_id)
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(folder)
            with rootfs.open("rb") as layer:
                tar.addfile(_member(layer_name, rootfs.stat().st_size), layer)
            tar.addfile(_member(config_name, len(config)), io.BytesIO(config))
            tar.addfile(_member("manifest.json", len(manifest)), io.BytesIO(manifest))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest
