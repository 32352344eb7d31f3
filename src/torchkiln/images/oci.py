"""Write an OCI image layout tar (``oci-layout``, ``index.json``, ``blobs/sha256/…``) from an opened image.

Each layer blob is copied once, as stored, from the source archive into the new tar, and its
digest is checked on the way (a docker-archive's uncompressed layer must hash to its diff id).
The output is deterministic (fixed mtimes and modes) and written atomically.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from torchkiln.errors import InputError
from torchkiln.images.archive import ImageArchive

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


class _Hashing:
    """A reader that hashes what passes through it (tarfile.addfile only calls ``read``)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        self.h.update(b)
        return b


def _tarinfo(name: str, size: int, *, directory: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = 0 if directory else size
    ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    ti.mode = 0o755 if directory else 0o644
    ti.mtime = 0
    return ti


def _blob_digest(name: str, diff_id: str) -> str:
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "blobs" and len(parts[2]) == 64:
        return f"{parts[1]}:{parts[2]}"
    if diff_id.startswith("sha256:") and len(diff_id) == 71:
        return diff_id
    raise InputError(f"layer {name} has no digest in the image config (rootfs.diff_ids).",
                     hint="Save the image again with `docker save`.")


def write_oci_archive(
    image: ImageArchive, dest: Path, ref_name: str, progress: Callable[[int], None] | None = None
) -> int:
    """Convert an opened image into an OCI image layout tar (deterministic); returns the layer count."""
    meta = image.meta
    cfg_digest = "sha256:" + hashlib.sha256(meta.config_raw).hexdigest()
    layers: list[dict[str, Any]] = []
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
            out.addfile(_tarinfo("blobs", 0, directory=True))
            out.addfile(_tarinfo("blobs/sha256", 0, directory=True))
            out.addfile(_tarinfo(f"blobs/sha256/{cfg_digest[7:]}", len(meta.config_raw)), io.BytesIO(meta.config_raw))
            for ref in meta.layers:
                if progress:
                    progress(ref.index)
                digest = _blob_digest(ref.path, ref.digest)
                blob = image.blob(ref)
                hashing = _Hashing(cast(IO[bytes], blob))
                out.addfile(_tarinfo(f"blobs/sha256/{digest.split(':', 1)[1]}", blob.size), hashing)
                got = "sha256:" + hashing.h.hexdigest()
                if got != digest:
                    raise InputError(f"layer {ref.path} of {meta.source} has digest {got}, expected {digest} "
                                     "(a compressed or corrupt layer).",
                                     hint="Save the image again with `docker save`.")
                media = OCI_LAYER + {"gzip": "+gzip", "zstd": "+zstd", "none": ""}[ref.compression]
                layers.append({"mediaType": media, "digest": digest, "size": blob.size})
            manifest = json.dumps({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(meta.config_raw)},
                "layers": layers,
            }, separators=(",", ":")).encode()
            m_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            out.addfile(_tarinfo(f"blobs/sha256/{m_digest[7:]}", len(manifest)), io.BytesIO(manifest))
            index = json.dumps({
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [{"mediaType": OCI_MANIFEST, "digest": m_digest, "size": len(manifest),
                               "annotations": {"org.opencontainers.image.ref.name": ref_name}}],
            }, separators=(",", ":")).encode()
            layout = b'{"imageLayoutVersion":"1.0.0"}'
            out.addfile(_tarinfo("oci-layout", len(layout)), io.BytesIO(layout))
            out.addfile(_tarinfo("index.json", len(index)), io.BytesIO(index))
        tmp.chmod(0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(layers)
