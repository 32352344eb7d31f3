"""Reproducible layers: the torch and package steps end with every file they wrote at one fixed time.

Docker 20.10's BuildKit writes each file's mtime into the layer tar as it is on disk, so two builds of
the same spec differ in every layer they write even when the bytes of every file agree: uv stamps the
files it installs with the time of the install, directories get the time of their last change, and
the ``.pyc`` files the warm import writes record their source's mtime. That exporter does not rewrite
timestamps itself (``SOURCE_DATE_EPOCH`` is honoured only by BuildKit 0.11+ / Docker 23+), so the steps
do it: ``SOURCE_DATE_EPOCH`` is a build argument (default 1980-01-01, the oldest time a zip entry can
hold; ``docker build --build-arg SOURCE_DATE_EPOCH=…`` overrides it), and each step touches what it
wrote — everything newer than that time below the paths it writes, which is exactly this step's files,
because the steps before left theirs at that time — so no file of an earlier layer is copied up.

The sources are stamped *before* the warm import, so each ``.pyc`` records the same source mtime; a
``py_compile``/``compileall`` run (``[python] precompile = "all"``) sees ``SOURCE_DATE_EPOCH`` and writes
checked-hash ``.pyc`` files instead. Ownership (root) and file order (BuildKit walks directories in
lexical order) are already fixed.

Mount points. BuildKit creates the file or folder a RUN mounts over when it is missing, and removes it
after the command: the folder that held it then carries the time the step ended, in the step's layer
(measured on Docker 20.10, examples/cpu.toml built twice with ``--no-cache``: ``/etc``, ``/kiln``,
``/kiln/bin`` and ``/run/secrets`` were the only entries of the torch layer that still differed). Nothing
inside the RUN can stamp them, and Docker 20.10's exporter cannot rewrite times (``rewrite-timestamp`` is
BuildKit 0.13+). So no step lets BuildKit create a mount point in the image's file system:

- the base stage adds ``.kiln/mount-points.tar`` (``ADD`` unpacks a local tar and, unlike ``COPY``, gives
  the folders it holds the tar's times): ``/etc`` with ``hosts`` and ``resolv.conf`` (BuildKit mounts its
  own over them in every RUN; a container runtime mounts the host's over them at start), ``/kiln`` and
  ``/run/secrets``, all at ``DEFAULT_EPOCH``;
- a RUN with mounts below ``/kiln`` or ``/run/secrets`` first mounts a tmpfs there (``tmpfs_mounts``),
  so the stubs of its bind, secret and cache mounts are made and removed in memory, not in a layer.

The runtime's user (``useradd``) is stamped from a mark made before it (``stamp_since``); ``useradd`` reads
``SOURCE_DATE_EPOCH`` for the password-change date it writes to ``/etc/shadow``. The package step on a vendor
image (NGC) is stamped the same way: its files lie beside the image's own in ``/usr/local``, which are newer
than ``SOURCE_DATE_EPOCH`` and must stay untouched (touching them would copy gigabytes up into the layer); its uv
cache is mounted below the ``/kiln`` tmpfs (``VENDOR_UV_CACHE_MOUNT``), so BuildKit makes no ``/root/.cache``.
"""

from __future__ import annotations

import io
import tarfile

from torchkiln.contract import KILN, VENV

#: 1980-01-01T00:00:00Z: fixed, and representable in a zip (wheels) unlike 0
DEFAULT_EPOCH = 315532800
ARG = f"ARG SOURCE_DATE_EPOCH={DEFAULT_EPOCH}"
#: where the torch and package steps write: the venv, the constraints, uv's credentials lock under /root
ROOTS = (VENV, "/etc/pip", "/root")
#: folders whose own entry a step changes (a child added or removed), stamped when they exist
PARENTS = ("/etc", "/tmp", "/opt", "/run")


#: what uv writes beside a distribution it installed from a local archive (a ``--find-links`` folder): the
#: archive's ctime, which is when the file was linked or copied into the build context, so it differs in every
#: build. uv reads it only to tell whether a path install is stale; the steps install by name and version.
UV_CACHE_INFO = "uv_cache.json"


def forget_install_times(root: str = VENV, mark: str | None = None) -> str:
    """Remove ``UV_CACHE_INFO`` from the distributions this step installed (below ``root``: newer than
    ``SOURCE_DATE_EPOCH``, or than ``mark`` where the folder holds older files of the base), and its line from
    their RECORD."""
    when = f"-newer {mark}" if mark else '-newermt "@$SOURCE_DATE_EPOCH"'
    return (f"find {root} -path '*.dist-info/{UV_CACHE_INFO}' {when} -exec sh -c 'for f; do rm -f \"$f\""
            f" && sed -i \"/\\.dist-info\\/uv_cache\\.json,/d\" \"${{f%/{UV_CACHE_INFO}}}/RECORD\"; done' sh {{}} +")


def stamp(roots: tuple[str, ...] = ROOTS) -> str:
    """The shell command that sets every file below ``roots`` newer than ``SOURCE_DATE_EPOCH`` (and the
    ``PARENTS`` folder entries) to that time, links themselves (``-h``) rather than their targets, after
    removing the install-time facts uv records (``forget_install_times``)."""
    when = '"@$SOURCE_DATE_EPOCH"'
    return (f"{forget_install_times()} "
            f"&& find {' '.join(roots)} -xdev -newermt {when} -exec touch -h -d {when} {{}} + "
            f"&& touch -c -h -d {when} {' '.join(PARENTS)}")


#: the packages steps' uv cache mount point, made in the torch step so BuildKit need not create it (a
#: folder BuildKit creates for a mount has the time of that step)
MOUNT_POINTS = "/root/.cache/uv"



def stamped_run(command: str, roots: tuple[str, ...] = ("/etc", "/home", "/var"),
                mark: str = "/tmp/kiln-user-mark") -> list[str]:
    """The lines of a RUN whose ``command`` writes beside older files of the base (``useradd``): a mark
    first, then everything the command changed below ``roots`` stamped from it (``stamp_since``)."""
    return [ARG, f"RUN touch {mark} && {command} \\", f"    && {stamp_since(mark, roots)}"]


#: the vendor package step's uv cache: the same cache as ``/root/.cache/uv`` elsewhere (same id), mounted below
#: the ``/kiln`` tmpfs, so that BuildKit creates no folder for it in the image's file system
VENDOR_UV_CACHE = "/kiln/uv-cache"
VENDOR_UV_CACHE_MOUNT = f"type=cache,id=/root/.cache/uv,target={VENDOR_UV_CACHE},sharing=locked"


#: the context file ``ADD``ed in the base stage (``mount_points_tar``)
MOUNT_POINTS_TAR = ".kiln/mount-points.tar"
SECRETS_DIR = "/run/secrets"
#: what the tar holds: (path, mode, text of a file or None for a folder)
_HOSTS = ("# written by torchkiln; a container runtime mounts its own over this file\n"
          "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
_RESOLV = "# written by torchkiln; a container runtime mounts the host's resolver configuration over this file\n"
_ENTRIES: tuple[tuple[str, int, str | None], ...] = (
    ("etc", 0o755, None),
    ("etc/hosts", 0o644, _HOSTS),
    ("etc/resolv.conf", 0o644, _RESOLV),
    (KILN.strip("/"), 0o755, None),
    ("run", 0o755, None),
    (SECRETS_DIR.strip("/"), 0o755, None),
)


def mount_points_tar() -> str:
    """The mount points every RUN needs, as a POSIX tar owned by root at ``DEFAULT_EPOCH``. It is all ASCII
    (ustar headers, these short texts, NUL padding), so it travels as one of the context's text files: the
    same bytes from every render."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, mode, text in _ENTRIES:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime, info.uname, info.gname = mode, DEFAULT_EPOCH, "root", "root"
            data = None if text is None else text.encode("ascii")
            if data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return buf.getvalue().decode("ascii")


def add_mount_points() -> list[str]:
    """The base stage's lines that add ``mount_points_tar`` (see the module's docstring)."""
    return ["# the folders and files BuildKit mounts over in a RUN exist beforehand, at a fixed time, so no step's",
            "# layer records when BuildKit created and removed them (render/reproducible.py)",
            f"ADD {MOUNT_POINTS_TAR} /"]


def tmpfs_mounts(targets: list[str]) -> list[str]:
    """The tmpfs mounts a RUN with these mount targets needs first: one on ``/kiln`` and one on ``/run/secrets``
    when a target lies below it, so the stubs of its other mounts never reach the file system of the image."""
    return [f"type=tmpfs,target={root}" for root in (KILN, SECRETS_DIR)
            if any(t.startswith(root + "/") for t in targets)]


def stamp_since(mark: str, roots: tuple[str, ...] = ("/etc", "/home", "/var")) -> str:
    """Set every file below ``roots`` changed after ``mark`` was made to ``SOURCE_DATE_EPOCH``, remove the mark
    and stamp its folder: for a step (``useradd``, the package step on a vendor image) whose files lie beside
    older files of the base, which must not be copied up."""
    when = '"@$SOURCE_DATE_EPOCH"'
    folder = mark.rsplit("/", 1)[0] or "/"
    return (f"find {' '.join(roots)} -xdev -newer {mark} -exec touch -h -d {when} {{}} + "
            f"&& rm -f {mark} && touch -h -d {when} {folder}")
