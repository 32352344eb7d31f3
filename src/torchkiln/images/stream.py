"""Read a docker-archive once, as it arrives (the engine's ``save`` on a pipe): no temporary file.

``docker save`` writes the layers before the ``manifest.json`` that orders them, so each layer is
handed to ``scan`` as it passes (with its name in the archive) and the image's metadata is built
at the end from the small JSON files kept on the way (:func:`torchkiln.images.meta.docker_archive_meta`,
the same parser as for an archive file). Layer blobs are told from the other files by their name or
first bytes (a tar header, gzip or zstd).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator
from typing import IO, TypeVar, cast

from torchkiln.errors import InputError
from torchkiln.images._io import ForwardReader, IOStats, Window
from torchkiln.images.archive import decompressed, is_tar, iter_layer_stream
from torchkiln.images.layers import Member, norm_path
from torchkiln.images.meta import GZIP_MAGIC, ZSTD_MAGIC, ImageMeta, compression_of, docker_archive_meta, parse_json

T = TypeVar("T")
_JSON_LIMIT = 64 << 20


def read_saved_stream(
    stream: IO[bytes] | int,
    source: str,
    tag: str | None,
    scan: Callable[[Iterator[Member]], T],
    stats: IOStats | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[ImageMeta, list[T]]:
    """Scan every layer of a docker-archive stream once; returns the image and one scan per layer, in order.

    ``stream`` is a file descriptor (a pipe: skipped bytes are spliced to /dev/null) or a readable
    object. ``progress(name, size)`` is told of each layer as it begins.
    """
    small: dict[str, bytes] = {}
    layers: dict[str, tuple[int, bytes, T]] = {}
    aliases: dict[str, str] = {}
    reader = ForwardReader(stream)
    try:
        with tarfile.open(fileobj=reader, mode="r:") as outer:
            for ti in outer:
                name = norm_path(ti.name)
                if ti.issym() or ti.islnk():
                    base = name.rpartition("/")[0]
                    aliases[name] = norm_path(ti.linkname if ti.islnk() else f"{base}/{ti.linkname}")
                    continue
                if not ti.isreg():
                    continue
                window = Window(reader, ti.size)
                head = window.peek(512)
                is_layer = (name.endswith("/layer.tar") or is_tar(head) or head.startswith((GZIP_MAGIC, ZSTD_MAGIC))
                            or (len(head) == 512 and not head.strip(b"\0")))
                if not is_layer:
                    if ti.size <= _JSON_LIMIT:  # manifest.json, configs, VERSION, repositories
                        small[name] = window.read()
                    continue
                if progress:
                    progress(name, ti.size)
                comp = compression_of(head, None)
                what = f"layer {name} of {source}"
                layer: IO[bytes] = window  # type: ignore[assignment]
                if comp != "none":
                    layer = cast(IO[bytes], ForwardReader(decompressed(cast(IO[bytes], window), comp, what, stats)))
                layers[name] = (ti.size, head[:4], scan(iter_layer_stream(layer, what, stats)))
        reader.seek(1 << 62)  # what follows the tar's end (the engine's padding): skipped, counted
        size = reader.tell()
    except (tarfile.TarError, EOFError, ValueError, io.UnsupportedOperation) as e:
        raise InputError(f"{source} is not a readable docker-archive stream ({e}).",
                         hint="Check that the engine can save the image (`docker save IMAGE > /dev/null`).") from None

    def resolve(name: str) -> str:
        name = norm_path(name)
        for _ in range(8):
            if name not in aliases:
                break
            name = aliases[name]
        return name

    def read_blob(name: str) -> bytes:
        key = resolve(name)
        if key not in small:
            raise InputError(f"{source} has no {name} although its manifest names it (an incomplete stream).",
                             hint="Save the image again.")
        return small[key]

    def layer_info(name: str) -> tuple[int, bytes]:
        key = resolve(name)
        if key not in layers:
            raise InputError(f"{source} has no layer {name} although its manifest names it (an incomplete stream).",
                             hint="Save the image again.")
        return layers[key][0], layers[key][1]

    if "manifest.json" not in small:
        raise InputError(f"{source} has no manifest.json (not a docker-archive stream).",
                         hint="Save the image as a docker-archive (`docker save` / "
                              "`podman save --format docker-archive`).")
    manifest = parse_json(small["manifest.json"], f"{source}: manifest.json")
    meta = docker_archive_meta(manifest, read_blob, layer_info, source, tag, size)
    return meta, [layers[resolve(ref.path)][2] for ref in meta.layers]
