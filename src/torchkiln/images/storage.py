"""Read an image in place from the engine's own storage: docker's overlay2, podman's overlay.

An image in a local docker or podman is a stack of folders (one per layer, the "diff" folders an
overlay mount stacks) and a config blob. The engine's ``image inspect`` names the folders
(``GraphDriver.Data``: ``LowerDir`` top first, then ``UpperDir`` the top layer) and the layer
digests (``RootFS.Layers``, base first); the config is the file whose sha256 is the image id
(docker: ``image/overlay2/imagedb/content/sha256/ID``; podman: ``overlay-images/ID/=base64(sha256:ID)``),
so what is read is checked to be that image. Reading them takes no export: a file's bytes are
read only where the analysis asks (the first bytes of each file, ELF headers, package metadata).

Overlay marks a deletion in a layer folder differently from a layer tar: a deleted file is a
character device 0/0 and a folder whose lower contents are hidden carries the extended attribute
``trusted.overlay.opaque=y`` (``user.overlay.opaque`` for a rootless engine). :func:`iter_layer_dir`
turns both into the same :class:`~torchkiln.images.layers.Member` whiteouts a ``.wh.`` tar entry
gives, so the rules of :mod:`torchkiln.images.layers` apply once, whatever the reader. Entries are
yielded in the order the engine writes a layer tar (each folder's names sorted bytewise, a folder
before its contents, its opaque marker right after it), and a regular file linked more than once in
the layer is yielded once as a file and then as hard links to its first path, as in the tar.

Our own code because no library reads an overlay layer folder as layer entries; the walk is
``os.scandir`` and the rules are the kernel's (Documentation/filesystems/overlayfs.rst).

Where the storage cannot be read in place (a remote engine, a rootless one, another storage
driver, not root) :func:`locate` raises :class:`NotInPlace` with the reason, and the caller falls
back to exporting the image with the engine's ``save``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchkiln.errors import InputError
from torchkiln.images._io import IOStats
from torchkiln.images.layers import Member, whiteout_of
from torchkiln.images.meta import ImageMeta, LayerRef, config_of, history_for_layers

if TYPE_CHECKING:
    from torchkiln.engines import ImageDetails, StoreEngine

#: the extended attributes overlayfs reads as "this folder hides the lower layers' contents"
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
#: storage drivers whose layers are plain folders this module can walk
DRIVERS = {"docker": "overlay2", "podman": "overlay"}


class NotInPlace(Exception):
    """The image cannot be read in place; ``str(e)`` says why (for the report and the --read hint)."""


@dataclass(frozen=True)
class StoredImage:
    """An image found in the engine's storage: its config and its layer folders, base first."""

    engine: str
    driver: str
    id: str
    name: str
    tags: tuple[str, ...]
    config_raw: bytes
    diff_ids: tuple[str, ...]
    layer_dirs: tuple[Path, ...]
    #: bytes of the image's regular files as the engine counts them (for progress)
    size: int


def remote_reason(engine: str, env: Mapping[str, str]) -> str | None:
    """Why ``engine`` (run with ``env``) is not on this machine, or None when it is local."""
    if engine == "docker":
        host = env.get("DOCKER_HOST", "")
        if host and not host.startswith("unix://"):
            return f"docker is remote (DOCKER_HOST={host})"
        ctx = env.get("DOCKER_CONTEXT", "")
        if ctx and ctx != "default":
            return f"docker uses context {ctx!r}, which may be remote"
    elif engine == "podman":
        host = env.get("CONTAINER_HOST", "")
        if host and not host.startswith("unix://"):
            return f"podman is remote (CONTAINER_HOST={host})"
        if env.get("CONTAINER_CONNECTION"):
            return f"podman uses connection {env['CONTAINER_CONNECTION']!r}, which may be remote"
    return None


def locate(
    engine: str,
    name: str,
    *,
    image_id: str,
    repo_tags: tuple[str, ...],
    diff_ids: tuple[str, ...],
    driver: str,
    driver_data: Mapping[str, str],
    size: int = 0,
    env: Mapping[str, str] | None = None,
) -> StoredImage:
    """The image ``name`` in ``engine``'s storage, from its ``image inspect`` fields; NotInPlace if it
    cannot be read in place here."""
    env = os.environ if env is None else env
    if engine not in DRIVERS:
        raise NotInPlace(f"{engine} keeps no layer folders")
    if (why := remote_reason(engine, env)) is not None:
        raise NotInPlace(why)
    if driver != DRIVERS[engine]:
        raise NotInPlace(f"{engine} uses the {driver or 'unknown'} storage driver "
                         f"(only {DRIVERS[engine]} is read in place)")
    if os.geteuid() != 0:
        raise NotInPlace(f"reading {engine}'s storage in place needs root (this is uid {os.geteuid()})")
    upper = driver_data.get("UpperDir", "")
    lower = [d for d in driver_data.get("LowerDir", "").split(":") if d]
    if not upper:
        raise NotInPlace(f"{engine} names no layer folder for {name}")
    dirs = tuple(Path(d) for d in [*reversed(lower), upper])
    if len(dirs) != len(diff_ids):
        raise NotInPlace(f"{engine} names {len(dirs)} layer folders for {len(diff_ids)} layers")
    for d in dirs:
        if not d.is_absolute() or not d.is_dir():
            raise NotInPlace(f"{d} is not a folder on this machine (the engine's storage is elsewhere)")
    hexid = image_id.removeprefix("sha256:")
    root = Path(upper).parents[2]
    if engine == "docker":
        config_path = root / "image" / "overlay2" / "imagedb" / "content" / "sha256" / hexid
    else:
        key = base64.b64encode(f"sha256:{hexid}".encode()).decode()
        config_path = root / "overlay-images" / hexid / f"={key}"
    try:
        raw = config_path.read_bytes()
    except OSError as e:
        raise NotInPlace(f"cannot read the image config {config_path} ({e.strerror})") from None
    if hashlib.sha256(raw).hexdigest() != hexid:
        raise NotInPlace(f"{config_path} is not the config of image {hexid[:12]}")
    return StoredImage(engine, driver, hexid, name, _tags_for(name, repo_tags), raw, diff_ids, dirs, size)


def locate_in_engine(
    engine: StoreEngine, image: str, details: ImageDetails, read: str, *, direct_hint: str
) -> tuple[StoredImage | None, str | None]:
    """``image`` of ``engine`` (its ``details`` from ``inspect_image``) in place, or None and why not (None
    when ``read`` is "export": not asked). ``read`` "direct" makes "not in place" an ``InputError`` with
    ``direct_hint``; "auto" leaves the caller to export it instead. The engine's runner's environment
    counts: a ``DOCKER_HOST`` of its own may put the storage on another machine."""
    if read == "export":
        return None, None
    try:
        return locate(
            engine.name, image, image_id=details.id, repo_tags=details.repo_tags, diff_ids=details.diff_ids,
            driver=details.driver, driver_data=details.driver_data, size=details.size,
            env={**os.environ, **getattr(engine.runner, "env", {})},
        ), None
    except NotInPlace as e:
        if read == "direct":
            raise InputError(f"{image} cannot be read in place from {engine.name}'s storage: {e}.",
                             hint=direct_hint) from None
        return None, str(e)


def _tags_for(name: str, repo_tags: tuple[str, ...]) -> tuple[str, ...]:
    """The tag ``engine save NAME`` writes into its archive: the image's tag that ``name`` names."""
    last = name.rsplit("/", 1)[-1]
    wanted = [name] if ":" in last or "@" in name else [name, f"{name}:latest"]
    for t in repo_tags:  # the tag as written first: "app:1" is not "someone/app:1"
        if t in wanted:
            return (t,)
    for w in wanted:  # then as the engine normalises names (localhost/…, docker.io/library/…)
        for t in repo_tags:
            if t.endswith("/" + w) or w.endswith("/" + t):
                return (t,)
    return ()


def stored_meta(img: StoredImage) -> ImageMeta:
    """The image's metadata, as :mod:`torchkiln.images.meta` reads it from an archive."""
    what = f"{img.engine} image {img.id[:12]}: config"
    config = config_of(img.config_raw, what)
    history = history_for_layers(config, len(img.layer_dirs))
    layers = tuple(
        LayerRef(i, img.diff_ids[i], str(d), 0, "none", created_by=history[i]) for i, d in enumerate(img.layer_dirs)
    )
    os_ = config.get("os") if isinstance(config.get("os"), str) else None
    arch = config.get("architecture") if isinstance(config.get("architecture"), str) else None
    return ImageMeta("engine-storage", img.name, img.tags, os_, arch, config, layers, 0, img.config_raw)


def _is_opaque(path: str) -> bool:
    for attr in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, attr, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


#: bytes read ahead from the start of each regular file (every magic number the analysis checks)
HEAD_BYTES = 64
#: threads reading those heads ahead of the analysis, and files per task
PREFETCH_THREADS = 8
_BATCH = 64


def iter_layer_dir(root: Path, stats: IOStats | None = None) -> Iterator[Member]:
    """The entries of one overlay layer folder as layer members, in the engine's tar order.

    A 0/0 character device is a whiteout of its path; a folder with the opaque attribute is
    followed by an opaque whiteout of itself; a ``.wh.`` name (a layer stored from a tar by a
    driver that keeps them) means what it means in a tar. A folder that vanishes while it is read
    (the image removed meanwhile) is an InputError.

    The folder is listed first; then the first bytes of its regular files are read by a few
    threads ahead of the caller, in the order it will ask for them: with a cold page cache each is
    a random read of the disk, and tens of thousands of them one after the other were most of the
    time of an inspection (the reads release the GIL; parsing stays on the caller's thread).
    """
    seen: dict[tuple[int, int], str] = {}
    top = str(root)
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            raise InputError(f"{top} is not a layer folder.")
        members = list(_walk(top, "", seen, stats))
    except OSError as e:
        raise InputError(
            f"cannot read the layer folder {top} ({e.strerror}): the image changed while it was read.",
            hint="Run the inspection again, or give `--read export`.",
        ) from None
    files = [m for m in members if m._file is not None and m.size >= 4]
    pool = ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="kiln-heads")
    try:
        pending = {}
        for i in range(0, len(files), _BATCH):
            batch = files[i:i + _BATCH]
            fut = pool.submit(_read_heads, batch)
            for m in batch:
                pending[id(m)] = fut
        for m in members:
            waiting = pending.pop(id(m), None)
            if waiting is not None:
                waiting.result()
                if stats is not None:
                    stats.add(len(m._head), 0.0)
            yield m
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _read_heads(batch: list[Member]) -> None:
    for m in batch:
        assert m._file is not None
        try:
            fd = os.open(m._file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # read_head opens it again and reports the error
        try:
            m._head = os.pread(fd, HEAD_BYTES, 0)
        except OSError:
            pass
        finally:
            os.close(fd)


def _walk(abs_dir: str, rel_dir: str, seen: dict[tuple[int, int], str], stats: IOStats | None) -> Iterator[Member]:
    with os.scandir(abs_dir) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    for e in entries:
        rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
        st = e.stat(follow_symlinks=False)
        mode = st.st_mode
        perm = stat.S_IMODE(mode)
        if stat.S_ISCHR(mode) and st.st_rdev == 0:
            yield Member(rel, "file", 0, perm, whiteout="file")
            continue
        kind, target = whiteout_of(rel)
        if kind is not None:
            yield Member(target, "file", 0, perm, whiteout=kind)
            continue
        if stat.S_ISDIR(mode):
            yield Member(rel, "dir", 0, perm)
            if _is_opaque(e.path):
                yield Member(rel, "file", 0, perm, whiteout="opaque")
            yield from _walk(e.path, rel, seen, stats)
        elif stat.S_ISREG(mode):
            if st.st_nlink > 1:
                first = seen.setdefault((st.st_dev, st.st_ino), rel)
                if first != rel:
                    yield Member(rel, "hardlink", 0, perm, linkname=first)
                    continue
            yield Member(rel, "file", st.st_size, perm, _file=e.path, _stats=stats)
        elif stat.S_ISLNK(mode):
            yield Member(rel, "symlink", 0, perm, linkname=os.readlink(e.path))
        else:  # a device, a FIFO, a socket
            yield Member(rel, "other", 0, perm)
