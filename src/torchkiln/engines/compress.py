"""Push an image with a layer compression other than the engine's default gzip.

``kiln push --compression`` goes through existing tools only; which tool depends on the engine,
and that choice lives here:

============== ============================================ ============================================
compression    podman                                       docker
============== ============================================ ============================================
gzip           ``podman push``                              ``docker push``
zstd,          ``podman push --compression-format F``       ``docker save | podman load``, then the same
zstd:chunked   (``push_compressed`` below) (the copy removed from podman afterwards)
estargz        ``save`` → ``ctr-remote images import`` → ``ctr-remote images convert --estargz --oci``
               → ``ctr-remote images export`` → ``skopeo copy oci-archive:… docker://REF`` (blobs kept)
============== ============================================ ============================================

eStargz keeps gzip (a runtime without the stargz snapshotter reads it as usual) and announces each
layer's table of contents in the manifest (``containerd.io/snapshot/stargz/toc.digest``). With a
first-run record (``kiln push --first-run FILE``, written by ``kiln verify --record-first-run``) the
convert also gets ``--estargz-record-in FILE``: the files it names come first in each layer, before a
``.prefetch.landmark`` entry, and the snapshotter prefetches them when a container starts.

skopeo and podman read the engine's stored login (``~/.docker/config.json``, ``auth.json``) and the
registry CAs under ``/etc/docker/certs.d`` / ``/etc/containers/certs.d``: torchkiln passes no
credential. A registry on a loopback address is reached over plain HTTP, as Docker does by default.
ctr-remote only converts (in a namespace of its own in the local containerd, removed afterwards);
it never talks to the registry. Missing tools are reported (exit 11, with the Debian package) before
anything slow runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from torchkiln.engines.engine import is_loopback, pushed_digest, registry_failure, registry_of
from torchkiln.errors import InputError, ToolMissingError
from torchkiln.runner import Runner

if TYPE_CHECKING:
    from torchkiln.engines.oci import OciEngine

Compression = Literal["gzip", "zstd", "zstd:chunked", "estargz"]
COMPRESSIONS: tuple[str, ...] = get_args(Compression)

#: the Debian package that ships each tool
PACKAGES = {"skopeo": "skopeo", "ctr-remote": "stargz-snapshotter", "podman": "podman"}
#: ctr-remote's convert flag for each format it writes (stargz-snapshotter's converters)
CONVERT_FLAGS = {"estargz": "--estargz"}


#: containerd's sockets (where ctr-remote converts): its own service's, then the one dockerd started
CONTAINERD_SOCKETS = ("/run/containerd/containerd.sock", "/run/docker/containerd/containerd.sock")


def containerd_address(env: Mapping[str, str] | None = None) -> str:
    """CONTAINERD_ADDRESS (as for ctr) if set, else the first socket of ``CONTAINERD_SOCKETS`` that exists."""
    env = os.environ if env is None else env
    if env.get("CONTAINERD_ADDRESS"):
        return env["CONTAINERD_ADDRESS"]
    return next((s for s in CONTAINERD_SOCKETS if Path(s).exists()), CONTAINERD_SOCKETS[0])


def required_tools(engine: str, compression: str) -> tuple[str, ...]:
    """The programs besides the engine that a push of ``engine``'s image with ``compression`` runs."""
    if compression == "gzip" or (engine == "podman" and compression in ("zstd", "zstd:chunked")):
        return ()
    if compression in CONVERT_FLAGS:
        return ("ctr-remote", "skopeo")
    return ("podman",)  # docker's image is loaded into podman, which pushes zstd (engines/podman.py)


def check_tools(engine: str, compression: str, env: Mapping[str, str] | None = None) -> None:
    """Refuse at once (exit 11) when a tool the push needs is missing, before any save or push."""
    missing = [t for t in required_tools(engine, compression) if shutil.which(t) is None]
    if missing:
        packages = " ".join(dict.fromkeys(PACKAGES[t] for t in missing))
        raise ToolMissingError(
            f"kiln push --compression {compression} with {engine} needs "
            + ", ".join(f"`{t}`" for t in missing)
            + ", not installed (not found on PATH); nothing was pushed.",
            hint=f"Install it (Debian/Ubuntu: apt-get install -y {packages}), or push with --compression gzip.",
        )
    if compression in CONVERT_FLAGS:
        address = containerd_address(env)
        if not Path(address).exists():
            raise ToolMissingError(
                f"kiln push --compression {compression} converts the layers in containerd, but its socket "
                f"{address} does not exist; nothing was pushed.",
                hint="Start containerd (Debian: apt-get install -y containerd; dockerd 20.10 runs one under "
                     "/run/docker/containerd), or set CONTAINERD_ADDRESS to its socket.",
            )


def skopeo_dest_flags(ref: str) -> list[str]:
    """skopeo's destination flags for ``ref``: plain HTTP for a loopback registry, else TLS as configured."""
    return ["--dest-tls-verify=false"] if is_loopback(registry_of(ref)) else []


def _hint(engine: str, ref: str) -> str:
    return f"Check the registry part of {ref} and the engine's login ({engine} login {registry_of(ref)})."


@contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kiln-push-") as d:
        yield Path(d)


def skopeo_copy(runner: Runner, engine: str, source: str, ref: str, extra: list[str], work: Path) -> str:
    """``skopeo copy SOURCE docker://REF``; returns the manifest digest skopeo wrote."""
    digest_file = work / "digest"
    runner.run(
        ["skopeo", "copy", "--quiet", "--digestfile", str(digest_file), *skopeo_dest_flags(ref), *extra,
         source, f"docker://{ref}"],
        what=f"skopeo copy to {ref}",
        hint=_hint(engine, ref),
        classify=lambda result: registry_failure("skopeo", ref, result),
        install_hint="apt-get install -y skopeo",
    )
    return digest_file.read_text().strip() if digest_file.is_file() else ""


def convert_args(compression: str, source: str, dest: str, first_run: Path | None = None) -> list[str]:
    """The arguments of ``ctr-remote images convert`` (after the global flags): the format's flag,
    ``--estargz-record-in FILE`` for a first-run record (files to place first), ``--oci``, then the images."""
    if compression not in CONVERT_FLAGS:
        raise InputError(f"ctr-remote does not convert to {compression!r}.",
                         hint=f"Use one of: {', '.join(CONVERT_FLAGS)}.")
    args = ["images", "convert", CONVERT_FLAGS[compression]]
    if first_run is not None:
        if compression != "estargz":
            raise InputError("a first-run record is for --compression estargz only.",
                             hint="Push with --compression estargz, or leave out --first-run.")
        args += ["--estargz-record-in", str(first_run)]
    return [*args, "--oci", source, dest]


def push_converted(runner: Runner, engine: str, binary: str, image: str, ref: str, compression: str,
                   env: Mapping[str, str] | None = None, first_run: Path | None = None) -> str:
    """Convert ``image``'s layers to eStargz or zstd:chunked with ctr-remote (each layer's table of
    contents is a manifest annotation), then push the converted blobs unchanged with skopeo.
    ``first_run``: a record of the files to place first in each layer (ctr-remote's record format)."""
    address = containerd_address(env)
    namespace = f"kiln-push-{os.getpid()}"
    ctr = ["ctr-remote", "--address", address, "--namespace", namespace]
    src, dst = f"kiln.local/push/src:{os.getpid()}", f"kiln.local/push/esgz:{os.getpid()}"
    with _workdir() as work:
        archive, converted = work / "image.tar", work / "estargz.tar"
        try:
            runner.run([binary, "save", "-o", str(archive), image], what=f"{engine} save {image}")
            runner.run([*ctr, "images", "import", "--base-name", src.rsplit(":", 1)[0], "--digests",
                        str(archive)], what="ctr-remote images import")
            # the import names the image by the archive's own tag; retag it to a name of ours
            listed = runner.run([*ctr, "images", "ls", "-q"], what="ctr-remote images ls").stdout.split()
            source = next((name for name in listed if name != dst), "")
            archive.unlink()
            record = first_run.resolve() if first_run is not None else None
            runner.run([*ctr, *convert_args(compression, source, dst, record)],
                       what=f"ctr-remote images convert {CONVERT_FLAGS[compression]}")
            runner.run([*ctr, "images", "export", str(converted), dst], what="ctr-remote images export")
            return skopeo_copy(runner, engine, f"oci-archive:{converted}", ref, [], work)
        finally:
            listed = runner.run([*ctr, "images", "ls", "-q"], check=False).stdout.split()
            if listed:
                runner.run([*ctr, "images", "rm", "--sync", *listed], check=False)
            runner.run(["ctr-remote", "--address", address, "namespaces", "rm", namespace], check=False)


#: the compressions podman pushes itself (``--compression-format``); gzip is every engine's own push
PODMAN_COMPRESSIONS = ("zstd", "zstd:chunked")


def push_compressed(source: OciEngine, podman: OciEngine, image: str, compression: str) -> str:
    """Push ``image`` of ``source`` with zstd or zstd:chunked layers through ``podman`` (docker pushes gzip
    only; ``podman`` is ``source`` itself when that is podman).

    From docker, the image is first streamed into podman's store (``docker save | podman load``) and
    removed from it afterwards. A registry on the loopback interface is reached without TLS, as docker
    does by default; any other needs TLS (and podman's own login, or docker's config.json, which
    podman also reads). Returns the pushed manifest's digest.
    """
    if compression not in PODMAN_COMPRESSIONS:
        raise InputError(f"unknown layer compression {compression!r}.",
                         hint=f"Use one of: {', '.join(PODMAN_COMPRESSIONS)}.")
    loaded = False
    if podman is not source:
        with source.save_stream(image) as fd:
            podman.runner.run([podman.info.binary, "load"], stdin=Path(f"/dev/fd/{fd}"),
                              what=f"{source.name} save {image} | podman load")
        loaded = True
    try:
        tls = ["--tls-verify=false"] if is_loopback(registry_of(image)) else []
        r = podman.runner.run(
            [podman.info.binary, "push", "--compression-format", compression, *tls, image],
            what=f"podman push --compression-format {compression} {image}",
            hint=f"Check the registry part of {image} and podman's login (podman login REGISTRY).",
            classify=lambda result: registry_failure("podman", image, result),
        )
        return pushed_digest(r.output)
    finally:
        if loaded:
            podman.runner.run([podman.info.binary, "rmi", image], check=False, what=f"podman rmi {image}")
