"""What an image is, from its manifests and config: pure functions over untrusted JSON.

Shared by every reader (an archive file, a directory layout, a ``save`` stream read once): they
differ in how they fetch a named blob, not in how its JSON is understood. Every value is checked
for its type before it is used (a list where an object belongs, a number where a name belongs,
deep nesting, a digest with ``/`` or ``..``): each is an :class:`~torchkiln.errors.InputError`
that names the file and the field, never a ``KeyError`` or ``AttributeError``.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from torchkiln.errors import InputError

Compression = Literal["none", "gzip", "zstd"]
ImageFormat = Literal["docker-archive", "oci-layout", "engine-storage"]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
#: the OCI digest grammar (image-spec descriptor.md): algorithm ":" encoded, no "/" and no ".."
_DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
_MAX_INDEX_DEPTH = 4
_CORRUPT = "The archive is corrupt or was not written by an image tool; save or download it again."


@dataclass(frozen=True)
class LayerRef:
    """One layer of an image, in order from the base."""

    index: int
    #: uncompressed digest (``rootfs.diff_ids``) when the config has it, else the blob digest
    digest: str
    #: where the layer lies in the archive or layout (or the engine's storage)
    path: str
    #: bytes stored in the archive (compressed size for compressed layers)
    blob_size: int
    compression: Compression
    media_type: str | None = None
    #: the instruction that made the layer (the config's history), when known
    created_by: str | None = None


@dataclass(frozen=True)
class ImageMeta:
    format: ImageFormat
    source: str
    tags: tuple[str, ...]
    os: str | None
    architecture: str | None
    config: dict[str, Any]
    layers: tuple[LayerRef, ...]
    #: bytes of the archive (or the layout's blobs) on disk
    archive_size: int
    #: the config blob as stored (its sha256 is the image id)
    config_raw: bytes = b""


def parse_json(data: bytes, what: str) -> Any:
    """JSON from an image; malformed, non-UTF-8 or absurdly nested text is an InputError."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{what} is not valid JSON ({e}).", hint=_CORRUPT) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be an image's JSON.", hint=_CORRUPT) from None


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{what} is {_kind(value)}, not a JSON object.", hint=_CORRUPT)
    return value


def _opt_obj(value: Any, what: str) -> dict[str, Any]:
    return {} if value is None else _obj(value, what)


def _opt_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{what} is {_kind(value)}, not a JSON list.", hint=_CORRUPT)
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{what} is {_kind(value)}, not a name.", hint=_CORRUPT)
    return value


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _kind(value: Any) -> str:
    if value is None:
        return "missing or null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def blob_name(digest: Any, source: str = "the OCI layout") -> str:
    """``sha256:abc…`` → ``blobs/sha256/abc…``; anything not a well-formed digest is refused."""
    if not isinstance(digest, str) or not _DIGEST.match(digest) or len(digest) > 256:
        raise InputError(f"{source}: malformed blob digest {str(digest)[:100]!r}.", hint=_CORRUPT)
    alg, _, hexd = digest.partition(":")
    return f"blobs/{alg}/{hexd}"


def compression_of(head: bytes, media_type: str | None) -> Compression:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if media_type and (media_type.endswith("+gzip") or media_type.endswith(".gzip")):
        return "gzip"
    if media_type and media_type.endswith("+zstd"):
        return "zstd"
    return "none"


def history_for_layers(config: dict[str, Any], count: int) -> list[str | None]:
    """The instruction that made each of ``count`` layers (history entries that are not empty layers)."""
    raw = config.get("history")
    hist = [h for h in raw if isinstance(h, dict) and not h.get("empty_layer")] if isinstance(raw, list) else []
    out: list[str | None] = []
    for h in hist[:count]:
        text = h.get("created_by") or h.get("comment") or ""
        text = text.strip() if isinstance(text, str) else ""
        if text.startswith("/bin/sh -c #(nop) "):  # the classic builder's non-RUN instructions
            text = text[len("/bin/sh -c #(nop) ") :].strip()
        elif text.startswith("/bin/sh -c "):
            text = "RUN " + text[len("/bin/sh -c ") :]
        if text.endswith(" # buildkit"):
            text = text[: -len(" # buildkit")]
        out.append(text or None)
    out += [None] * (count - len(out))
    return out


def diff_ids(config: dict[str, Any], what: str) -> list[str]:
    rootfs = _opt_obj(config.get("rootfs"), f"{what}: rootfs")
    return [str(d) for d in _opt_list(rootfs.get("diff_ids"), f"{what}: rootfs.diff_ids")]


def config_of(raw: bytes, what: str) -> dict[str, Any]:
    config = _obj(parse_json(raw, what), what)
    _opt_obj(config.get("config"), f"{what}: config")
    return config


#: (bytes stored, first 4 bytes) of a named layer blob
LayerInfo = Callable[[str], tuple[int, bytes]]


def docker_archive_meta(
    manifest: Any,
    read_blob: Callable[[str], bytes],
    layer_info: LayerInfo,
    source: str,
    tag: str | None,
    archive_size: int,
) -> ImageMeta:
    """The image a docker-archive's ``manifest.json`` describes (the one tagged ``tag``, else the first)."""
    what = f"{source}: manifest.json"
    entries = _opt_list(manifest, what)
    if not entries:
        raise InputError(f"{what} does not describe any image.", hint=_CORRUPT)
    entry = _obj(entries[0], f"{what}[0]")
    if tag is not None:
        for i, m in enumerate(entries):
            m = _obj(m, f"{what}[{i}]")
            if tag in _opt_list(m.get("RepoTags"), f"{what}[{i}].RepoTags"):
                entry = m
                break
    config_name = _str(entry.get("Config"), f"{what}: Config")
    layer_names = [_str(x, f"{what}: Layers[{i}]")
                   for i, x in enumerate(_opt_list(entry.get("Layers"), f"{what}: Layers"))]
    config_raw = read_blob(config_name)
    config = config_of(config_raw, f"{source}: {config_name}")
    ids = diff_ids(config, f"{source}: {config_name}")
    history = history_for_layers(config, len(layer_names))
    layers = []
    for i, name in enumerate(layer_names):
        size, head = layer_info(name)
        digest = ids[i] if i < len(ids) else name.rpartition("/")[0] or name
        layers.append(LayerRef(i, digest, name, size, compression_of(head, None), created_by=history[i]))
    tags = tuple(str(t) for t in _opt_list(entry.get("RepoTags"), f"{what}: RepoTags"))
    return ImageMeta("docker-archive", source, tags, _opt_str(config.get("os")), _opt_str(config.get("architecture")),
                     config, tuple(layers), archive_size, config_raw)


def _ref_names(desc: dict[str, Any]) -> tuple[str | None, str | None]:
    ann = desc.get("annotations")
    ann = ann if isinstance(ann, dict) else {}
    return _opt_str(ann.get("org.opencontainers.image.ref.name")), _opt_str(ann.get("io.containerd.image.name"))


def _pick(index: dict[str, Any], what: str, tag: str | None) -> dict[str, Any]:
    manifests = [m for m in _opt_list(index.get("manifests"), f"{what}: manifests") if isinstance(m, dict)]
    if not manifests:
        raise InputError(f"{what} lists no image manifest.", hint=_CORRUPT)
    if tag is not None:
        named = [m for m in manifests if tag in _ref_names(m)]
        manifests = named or manifests
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

    def rank(m: dict[str, Any]) -> int:
        p, a = m.get("platform"), m.get("annotations")
        plat: dict[str, Any] = p if isinstance(p, dict) else {}
        ann: dict[str, Any] = a if isinstance(a, dict) else {}
        if ann.get("vnd.docker.reference.type") == "attestation-manifest" or plat.get("os") == "unknown":
            return 2
        return 0 if plat.get("architecture") in (None, machine) else 1

    return sorted(manifests, key=rank)[0]


def oci_manifest_descriptor(
    index: Any, read_json: Callable[[str], Any], source: str, tag: str | None
) -> dict[str, Any]:
    """The descriptor of the image manifest to read: ``tag``'s, else this machine's platform; nested
    indexes (multi-platform images) are followed a few levels deep."""
    what = f"{source}: index.json"
    desc = _pick(_obj(index, what), what, tag)
    for _depth in range(_MAX_INDEX_DEPTH):
        if desc.get("mediaType") not in INDEX_TYPES:
            return desc
        name = blob_name(desc.get("digest"), what)
        what = f"{source}: {name}"
        desc = _pick(_obj(read_json(name), what), what, None)
    raise InputError(f"{source}: image indexes nested more than {_MAX_INDEX_DEPTH} deep.", hint=_CORRUPT)


def oci_meta(
    desc: dict[str, Any],
    read_json: Callable[[str], Any],
    read_blob: Callable[[str], bytes],
    layer_info: LayerInfo,
    source: str,
    archive_size: int,
) -> ImageMeta:
    """The image an OCI manifest descriptor (from :func:`oci_manifest_descriptor`) describes."""
    name = blob_name(desc.get("digest"), f"{source}: index.json")
    manifest = _obj(read_json(name), f"{source}: {name}")
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        desc = oci_manifest_descriptor(manifest, read_json, source, None)
        if desc.get("mediaType") in INDEX_TYPES or desc.get("digest") is None:
            raise InputError(f"{source}: {name} is an index whose entries are not image manifests.", hint=_CORRUPT)
        name = blob_name(desc.get("digest"), f"{source}: {name}")
        manifest = _obj(read_json(name), f"{source}: {name}")
    what = f"{source}: {name}"
    cfg_desc = _obj(manifest.get("config"), f"{what}: config")
    cfg_name = blob_name(cfg_desc.get("digest"), what)
    config_raw = read_blob(cfg_name)
    config = config_of(config_raw, f"{source}: {cfg_name}")
    layer_descs = [_obj(d, f"{what}: layers[{i}]")
                   for i, d in enumerate(_opt_list(manifest.get("layers"), f"{what}: layers"))]
    ids = diff_ids(config, f"{source}: {cfg_name}")
    history = history_for_layers(config, len(layer_descs))
    layers = []
    for i, d in enumerate(layer_descs):
        lname = blob_name(d.get("digest"), what)
        size, head = layer_info(lname)
        media = _opt_str(d.get("mediaType"))
        layers.append(LayerRef(i, ids[i] if i < len(ids) else str(d.get("digest")), lname, size,
                               compression_of(head, media), media, history[i]))
    tags = tuple(t for t in reversed(_ref_names(desc)) if t)
    return ImageMeta("oci-layout", source, tags, _opt_str(config.get("os")), _opt_str(config.get("architecture")),
                     config, tuple(layers), archive_size, config_raw)
