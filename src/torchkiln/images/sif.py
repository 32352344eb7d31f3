"""Our own writer and reader of the Singularity Image Format (SIF), and the rootfs layout apptainer expects.

No Python library writes SIF (the one on the package index reads an old variant only and is
unmaintained), so this module implements the format from its specification: sylabs/sif and
apptainer/sif ``pkg/sif/*.go``, apptainer's ``internal/pkg/build/assemblers/sif.go``, and
``shared/reference/formats.md`` §2. Debian's ``siftool`` reads what it writes (tests check that).

File layout (all integers little-endian, packed)
------------------------------------------------

Global header, 128 bytes at offset 0::

    0   launch script, 32 bytes NUL-padded ("#!/usr/bin/env run-singularity\\n")
    32  magic "SIF_MAGIC\\0" (10)        42  version "01\\0" (3)
    45  primary arch "02\\0" (3)          48  UUID (16)
    64  created (i64 Unix s)              72  modified (i64)
    80  descriptors free (i64)           88  descriptors total (i64, 48)
    96  descriptors offset (i64, 4096)   104 descriptors size (i64, total × 585 = 28080)
    112 data offset (i64, 32176)         120 data size (i64: the sum of every object's size with padding)

Descriptor table at 4096: 48 slots of 585 bytes, unused slots all zero::

    0   data type (i32)       4   used (u8)            5   id (u32, slot + 1)
    9   group id (u32, group | 0xF0000000; 0xF0000000 = no group)
    13  linked id (u32)       17  offset (i64)         25  size (i64)
    33  size with padding (i64: offset + size − where the previous object ended)
    41  created (i64)         49  modified (i64)       57  uid (i64)    65  gid (i64)
    73  name (128, NUL-padded)
    201 extra (384, by type; a partition's is i32 fs type, i32 partition type, 3-byte arch "02\\0")

Data types 0x4001 Deffile, 0x4002 EnvVar, 0x4003 Labels, 0x4004 Partition, 0x4005 Signature,
0x4006 GenericJSON, 0x4007 Generic, 0x4008 CryptoMessage, 0x4009 SBOM, 0x400A OCIRootIndex,
0x400B OCIBlob. File systems 1 Squashfs, 2 Ext3, 3 ImmuObj, 4 Raw, 5 EncryptedSquashfs. Partition
types 1 System, 2 PrimSys, 3 Data, 4 Overlay. Arch codes are two ASCII digits: 01 386, 02 amd64,
03 arm, 04 arm64, 05 ppc64, 06 ppc64le, 07 mips, 08 mipsle, 09 mips64, 10 mips64le, 11 s390x,
12 riscv64. Objects follow the table from the data offset, each aligned to the page size (4096).

What ``apptainer build`` writes, and so what ``write_image_sif`` writes, in this order: the
definition file (Deffile, group 1); GenericJSON objects in name order, ``inspect-metadata.json``
(``{"data": {"attributes": {...}}, "type": "container"}``, the output of ``apptainer inspect --all``)
and, for images converted from OCI/Docker, ``oci-config.json`` (the image config's ``config``); then
one PrimSys Squashfs partition holding the root file system (``mksquashfs -noappend``, ``-all-root``
when not root). At run time apptainer checks the magic, finds the primary partition, reads a
squashfs superblock (``hsqs``) at its offset and checks the architecture.

The ``/.singularity.d`` layout inside the root file system
------------------------------------------------------------

Apptainer adds this to every rootfs it builds (``internal/pkg/build/sources/base_environment.go``,
``conveyorPacker_oci.go``, ``metadata.go``); ``add_singularity_layout`` writes the same files (its
own text, the same behaviour)::

    /.singularity.d/actions/{exec,run,shell,start,test}   0755: source env/*.sh in order, then exec
                                                          the command / runscript / shell / test
    /.singularity.d/env/01-base.sh                        0755, no settings
    /.singularity.d/env/10-docker2singularity.sh          0755, the image's ENV: PATH exported as is,
                                                          others as K="${K:-value}" (the host may override)
    /.singularity.d/env/90-environment.sh                 0755, a def file's %environment
    /.singularity.d/env/95-apps.sh                        0755, SCIF app variables (APPTAINER_APPNAME)
    /.singularity.d/env/99-base.sh                        0755, /.singularity.d/libs appended to LD_LIBRARY_PATH
    /.singularity.d/env/99-runtimevars.sh                 0755, apptainer's --env-path variables
    /.singularity.d/libs/                                 bind target of --nv driver libraries
    /.singularity.d/runscript, startscript                0755; from ENTRYPOINT/CMD for OCI sources
    /.singularity.d/labels.json                           0644, the image labels plus build labels
    /.singularity.d/Singularity                           0644, the definition file
    /apptainer -> .singularity.d/runscript, /.exec /.run /.shell /.test -> actions/*,
    /environment -> .singularity.d/env/90-environment.sh
    dev proc sys root tmp var/tmp home etc (created if missing); etc/hosts and etc/resolv.conf
    emptied (apptainer binds the host's over them).

One deliberate difference: the runscript written here follows OCI semantics without apptainer's
shell re-evaluation of CMD (its ``SINGULARITY_NO_EVAL`` mode), and with no arguments it runs CMD in
the image's ``WORKDIR``, so that an image whose command names a path relative to its working
directory (``python apps/train.py``) runs as it does under Docker.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import stat
import struct
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO

from torchkiln import __version__
from torchkiln.errors import InputError, ToolMissingError, disk_full
from torchkiln.images.confine import Confined, remove_at
from torchkiln.runner import Runner

_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
MAGIC = b"SIF_MAGIC\0"
VERSION = b"01\0"
HEADER_SIZE = 128
DESCRIPTOR_SIZE = 585
DESCRIPTORS_TOTAL = 48
DESCRIPTORS_OFFSET = 4096
DATA_OFFSET = DESCRIPTORS_OFFSET + DESCRIPTORS_TOTAL * DESCRIPTOR_SIZE  # 32176
ALIGNMENT = 4096
GROUP_MASK = 0xF0000000
DEFAULT_GROUP = 1
SQUASHFS_MAGIC = b"hsqs"

INSPECT_METADATA = "inspect-metadata.json"
MKSQUASHFS_HINT = (
    "Install squashfs-tools (Debian/Ubuntu: apt-get install squashfs-tools; RHEL: dnf install squashfs-tools)."
)
OCI_CONFIG = "oci-config.json"

_HEADER = struct.Struct("<32s10s3s3s16sqqqqqqqq")
_DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
_PARTITION = struct.Struct("<ii3s")
assert _HEADER.size == HEADER_SIZE and _DESCRIPTOR.size == DESCRIPTOR_SIZE


class DataType(IntEnum):
    DEFFILE = 0x4001
    ENVVAR = 0x4002
    LABELS = 0x4003
    PARTITION = 0x4004
    SIGNATURE = 0x4005
    GENERIC_JSON = 0x4006
    GENERIC = 0x4007
    CRYPTO_MESSAGE = 0x4008
    SBOM = 0x4009
    OCI_ROOT_INDEX = 0x400A
    OCI_BLOB = 0x400B


class FsType(IntEnum):
    SQUASHFS = 1
    EXT3 = 2
    IMMUOBJ = 3
    RAW = 4
    ENCRYPTED_SQUASHFS = 5


class PartType(IntEnum):
    SYSTEM = 1
    PRIMSYS = 2
    DATA = 3
    OVERLAY = 4


#: Go architecture name → SIF arch code (pkg/sif/arch.go)
ARCH_CODES: dict[str, str] = {
    "386": "01", "amd64": "02", "arm": "03", "arm64": "04", "ppc64": "05", "ppc64le": "06", "mips": "07",
    "mipsle": "08", "mips64": "09", "mips64le": "10", "s390x": "11", "riscv64": "12",
}
ARCH_NAMES = {v: k for k, v in ARCH_CODES.items()}


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass(frozen=True)
class Header:
    launch: str
    version: str
    arch: str  # Go name ("amd64"), "" when no primary partition
    id: uuid.UUID
    created: int
    modified: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int


@dataclass(frozen=True)
class Descriptor:
    data_type: int
    id: int
    group_id: int  # without the mask; 0 = no group
    linked_id: int
    offset: int
    size: int
    size_with_padding: int
    created: int
    modified: int
    uid: int
    gid: int
    name: str
    extra: bytes

    @property
    def type_name(self) -> str:
        try:
            return DataType(self.data_type).name
        except ValueError:
            return hex(self.data_type)

    @property
    def partition(self) -> tuple[int, int, str] | None:
        """(fs type, partition type, arch name) of a partition object, else None."""
        if self.data_type != DataType.PARTITION:
            return None
        fs, part, arch = _PARTITION.unpack_from(self.extra)
        code = _cstr(arch)
        return fs, part, ARCH_NAMES.get(code, code)


@dataclass(frozen=True)
class SifImage:
    path: Path
    header: Header
    descriptors: tuple[Descriptor, ...]

    def by_name(self, name: str) -> Descriptor | None:
        return next((d for d in self.descriptors if d.name == name), None)

    def of_type(self, data_type: DataType) -> list[Descriptor]:
        return [d for d in self.descriptors if d.data_type == data_type]

    def primary_partition(self) -> Descriptor | None:
        for d in self.of_type(DataType.PARTITION):
            p = d.partition
            if p is not None and p[1] == PartType.PRIMSYS:
                return d
        return None

    def read(self, d: Descriptor, limit: int | None = None) -> bytes:
        with self.path.open("rb") as f:
            f.seek(d.offset)
            return f.read(d.size if limit is None else min(limit, d.size))

    def json_object(self, name: str) -> Any:
        d = self.by_name(name)
        if d is None:
            raise InputError(f"{self.path} holds no {name} object.",
                             hint="Was it built by apptainer or kiln export?")
        try:
            return json.loads(self.read(d))
        except ValueError as e:
            raise InputError(f"{self.path}: {name} is not valid JSON ({e}).") from None

    @property
    def deffile(self) -> str:
        found = self.of_type(DataType.DEFFILE)
        return self.read(found[0]).decode("utf-8", "replace") if found else ""


# -- reading ---------------------------------------------------------------------------------------


def is_sif(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(HEADER_SIZE)
    except OSError:
        return False
    return len(head) == HEADER_SIZE and head[32:42] == MAGIC


def read_sif(path: Path) -> SifImage:
    """Read the header and descriptor table (the objects stay on disk; ``SifImage.read`` fetches one)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE or head[32:42] != MAGIC:
                raise InputError(f"{path} is not a SIF file (no SIF_MAGIC in its header).",
                                 hint="Give a .sif written by apptainer build or kiln export --format sif.")
            fields = _HEADER.unpack(head)
            (launch, _magic, version, arch, raw_id, created, modified, dfree, dtotal, doff, dsize,
             data_off, data_size) = fields
            if _cstr(version) != "01":
                raise InputError(f"{path}: SIF version {_cstr(version)!r} is not supported (only 01).")
            if not (0 < dtotal <= 4096 and doff >= HEADER_SIZE and doff + dtotal * DESCRIPTOR_SIZE <= size):
                raise InputError(f"{path}: the descriptor table lies outside the file (truncated or corrupt).",
                                 hint="Copy the file again; compare its size with the original.")
            f.seek(doff)
            table = f.read(dtotal * DESCRIPTOR_SIZE)
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror}).", hint="Check the path and its permissions.") from None
    descriptors = []
    for i in range(dtotal):
        (dtype, used, did, group, link, off, dsz, padded, dc, dm, uid, gid, name, extra) = _DESCRIPTOR.unpack_from(
            table, i * DESCRIPTOR_SIZE)
        if not used:
            continue
        if off < 0 or dsz < 0 or off + dsz > size:
            raise InputError(f"{path}: object {did} lies outside the file (truncated or corrupt).",
                             hint="Copy the file again; compare its size with the original.")
        descriptors.append(Descriptor(dtype, did, group & ~GROUP_MASK, link, off, dsz, padded, dc, dm, uid, gid,
                                      _cstr(name), extra))
    header = Header(_cstr(launch), _cstr(version), ARCH_NAMES.get(_cstr(arch), _cstr(arch)), uuid.UUID(bytes=raw_id),
                    created, modified, dfree, dtotal, doff, dsize, data_off, data_size)
    return SifImage(path, header, tuple(descriptors))


# -- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SifObject:
    """One data object to write: bytes in memory, or a file streamed in (a partition)."""

    data_type: DataType
    name: str = ""
    data: bytes | None = None
    path: Path | None = None
    fs_type: FsType = FsType.SQUASHFS
    part_type: PartType = PartType.PRIMSYS
    arch: str = "amd64"
    group: int = DEFAULT_GROUP
    linked_id: int = 0

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.path is not None
        return self.path.stat().st_size

    def extra(self) -> bytes:
        if self.data_type != DataType.PARTITION:
            return b""
        if self.arch not in ARCH_CODES:
            raise InputError(f"architecture {self.arch!r} has no SIF code.", hint=f"Use one of {sorted(ARCH_CODES)}.")
        return _PARTITION.pack(int(self.fs_type), int(self.part_type), ARCH_CODES[self.arch].encode() + b"\0")


def _aligned(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _copy(src: Path, dst: BinaryIO) -> None:
    with src.open("rb") as f:
        shutil.copyfileobj(f, dst, 1 << 20)


def write_sif(
    dest: Path,
    objects: Sequence[SifObject],
    *,
    image_id: uuid.UUID,
    created: int,
    launch: bytes = LAUNCH_SCRIPT,
    alignment: int = ALIGNMENT,
) -> SifImage:
    """Write a SIF file; atomic (a temporary file renamed into place). Same inputs, same bytes."""
    if len(objects) > DESCRIPTORS_TOTAL:
        raise InputError(f"a SIF file holds at most {DESCRIPTORS_TOTAL} objects (got {len(objects)}).")
    prim = [o for o in objects if o.data_type == DataType.PARTITION and o.part_type == PartType.PRIMSYS]
    if len(prim) > 1:
        raise InputError("a SIF file has at most one primary system partition.")
    arch = (ARCH_CODES[prim[0].arch] if prim else "00").encode() + b"\0"
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    tmp = Path(tmp_name)
    table = bytearray(DESCRIPTORS_TOTAL * DESCRIPTOR_SIZE)
    try:
        with os.fdopen(fd, "wb") as out:
            pos = DATA_OFFSET
            for i, obj in enumerate(objects):
                start = _aligned(pos, alignment)
                out.seek(start)
                size = obj.size
                if obj.data is not None:
                    out.write(obj.data)
                else:
                    assert obj.path is not None
                    _copy(obj.path, out)
                if out.tell() != start + size:
                    raise InputError(f"{obj.path} changed while it was copied into {dest}.")
                name = obj.name.encode()
                if len(name) > 127:
                    raise InputError(f"SIF object name {obj.name!r} is longer than 127 bytes.")
                _DESCRIPTOR.pack_into(
                    table, i * DESCRIPTOR_SIZE, int(obj.data_type), True, i + 1, obj.group | GROUP_MASK,
                    obj.linked_id, start, size, start + size - pos, created, created, 0, 0, name, obj.extra())
                pos = start + size
            out.seek(DESCRIPTORS_OFFSET)
            out.write(table)
            out.seek(0)
            out.write(_HEADER.pack(
                launch, MAGIC, VERSION, arch, image_id.bytes, created, created,
                DESCRIPTORS_TOTAL - len(objects), DESCRIPTORS_TOTAL, DESCRIPTORS_OFFSET, len(table),
                DATA_OFFSET, pos - DATA_OFFSET))
            out.truncate(max(pos, DATA_OFFSET))
        tmp.chmod(0o755)  # a SIF is executable through its launch script (run-singularity)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return read_sif(dest)


# -- the /.singularity.d layout ------------------------------------------------------------------------

_SOURCE_ENV = """for script in /.singularity.d/env/*.sh; do
    if [ -f "$script" ]; then
        . "$script"
    fi
done
"""

ACTIONS: dict[str, str] = {
    "exec": f"""#!/bin/sh
# apptainer exec: the environment scripts in order, then the command
{_SOURCE_ENV}
exec "$@"
""",
    "run": f"""#!/bin/sh
# apptainer run: the environment scripts in order, then the app's or the image's runscript
{_SOURCE_ENV}
if [ -n "${{APPTAINER_APPNAME:-}}" ]; then
    for dir in "/scif/apps/${{APPTAINER_APPNAME}}" /scif/apps/singularity; do
        if [ -x "$dir/scif/runscript" ]; then
            exec "$dir/scif/runscript" "$@"
        fi
    done
    echo "No Apptainer runscript for contained app: ${{APPTAINER_APPNAME}}" >&2
    exit 1
fi
if [ -x /.singularity.d/runscript ]; then
    exec /.singularity.d/runscript "$@"
fi
echo "No Apptainer runscript found, executing /bin/sh" >&2
exec /bin/sh "$@"
""",
    "shell": f"""#!/bin/sh
# apptainer shell: the environment scripts in order, then $APPTAINER_SHELL, bash or sh
{_SOURCE_ENV}
if [ -n "${{APPTAINER_SHELL:-}}" ] && [ -x "$APPTAINER_SHELL" ]; then
    exec "$APPTAINER_SHELL" "$@"
fi
if [ -x /bin/bash ]; then
    SHELL=/bin/bash
    PS1="Apptainer ${{APPTAINER_NAME:-}}:\\\\w> "
    export SHELL PS1
    exec /bin/bash --norc "$@"
fi
SHELL=/bin/sh
export SHELL
exec /bin/sh "$@"
""",
    "start": f"""#!/bin/sh
# apptainer instance start: let PID 1 continue, then the startscript
kill -CONT 1
{_SOURCE_ENV}
if [ -x /.singularity.d/startscript ]; then
    exec /.singularity.d/startscript
fi
""",
    "test": f"""#!/bin/sh
# apptainer test: the environment scripts in order, then the app's or the image's test script
{_SOURCE_ENV}
if [ -n "${{APPTAINER_APPNAME:-}}" ]; then
    for dir in "/scif/apps/${{APPTAINER_APPNAME}}" /scif/apps/singularity; do
        if [ -x "$dir/scif/test" ]; then
            exec "$dir/scif/test" "$@"
        fi
    done
    echo "No tests for contained app: ${{APPTAINER_APPNAME}}" >&2
    exit 1
fi
if [ -x /.singularity.d/test ]; then
    exec /.singularity.d/test "$@"
fi
echo "No test found in container, executing /bin/sh -c true" >&2
exec /bin/sh -c true
""",
}

ENV_SCRIPTS: dict[str, str] = {
    "01-base.sh": "#!/bin/sh\n# base settings (none)\n",
    "90-environment.sh": "#!/bin/sh\n# Custom environment shell code should follow\n\n",
    "95-apps.sh": """#!/bin/sh
# SCIF apps: the selected app's folders first on PATH and LD_LIBRARY_PATH, and its environment
if [ -n "${APPTAINER_APPNAME:-}" ]; then
    export APPTAINER_APPNAME
    if [ ! -d "/scif/apps/${APPTAINER_APPNAME}/" ]; then
        echo "Could not locate the container application: ${APPTAINER_APPNAME}" >&2
        exit 1
    fi
    SCIF_APPS=/scif/apps
    SCIF_APPROOT="/scif/apps/${APPTAINER_APPNAME}"
    export SCIF_APPROOT SCIF_APPS
    PATH="$SCIF_APPROOT:/scif/apps/singularity:$PATH"
    if [ -d "$SCIF_APPROOT/bin" ]; then PATH="$SCIF_APPROOT/bin:$PATH"; fi
    if [ -d "$SCIF_APPROOT/lib" ]; then
        LD_LIBRARY_PATH="$SCIF_APPROOT/lib:${LD_LIBRARY_PATH:-}"
        export LD_LIBRARY_PATH
    fi
    for env in 01-base.sh 90-environment.sh; do
        if [ -f "$SCIF_APPROOT/scif/env/$env" ]; then . "$SCIF_APPROOT/scif/env/$env"; fi
    done
    export PATH
fi
""",
    "99-base.sh": """#!/bin/sh
# the driver libraries apptainer binds with --nv live in /.singularity.d/libs
if [ -z "${LD_LIBRARY_PATH:-}" ]; then
    LD_LIBRARY_PATH=/.singularity.d/libs
else
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"
fi
PS1="Apptainer> "
export LD_LIBRARY_PATH PS1
""",
    "99-runtimevars.sh": """#!/bin/sh
# PATH changes asked for on apptainer's command line (--env PREPEND_PATH / APPEND_PATH / PATH)
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"
fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then
    PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"
fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PATH}"
fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
""",
}

STARTSCRIPT = "#!/bin/sh\n"
ROOT_DIRS = ("dev", "proc", "sys", "root", "tmp", "var/tmp", "home", "etc")
SYMLINKS = {
    "apptainer": ".singularity.d/runscript",
    ".run": ".singularity.d/actions/run",
    ".exec": ".singularity.d/actions/exec",
    ".test": ".singularity.d/actions/test",
    ".shell": ".singularity.d/actions/shell",
    "environment": ".singularity.d/env/90-environment.sh",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI/Docker image config that shape a SIF (``config`` of the config JSON)."""

    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    created: int = 0  # Unix seconds; the SIF's timestamps (reproducible)
    arch: str = "amd64"
    raw: Mapping[str, Any] = field(default_factory=dict)  # the ``config`` object as the image has it

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageConfig:
        cfg = data.get("config") or data.get("Config") or {}
        return cls(
            env=tuple(cfg.get("Env") or ()),
            entrypoint=tuple(cfg.get("Entrypoint") or ()),
            cmd=tuple(cfg.get("Cmd") or ()),
            workdir=str(cfg.get("WorkingDir") or ""),
            labels=dict(cfg.get("Labels") or {}),
            created=parse_created(str(data.get("created") or "")),
            arch=str(data.get("architecture") or "amd64"),
            raw=dict(cfg),
        )


def parse_created(text: str) -> int:
    """An RFC 3339 time (``2024-05-01T12:00:00.123456789Z``) as Unix seconds; 0 when absent."""
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)?$", text.strip())
    if not m:
        return 0
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    tz = m.group(7)
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        t -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t


def _dq(value: str) -> str:
    """Escape for a double-quoted sh string."""
    return re.sub(r'([\\"$`])', r"\\\1", value)


def docker_env_script(env: Iterable[str]) -> str:
    """``10-docker2singularity.sh``: PATH exported as the image has it, others only where unset."""
    lines = ["#!/bin/sh", "# the image's ENV (others keep a value the host already gives them)"]
    for item in env:
        name, sep, value = item.partition("=")
        if not _ENV_NAME.match(name):
            continue  # not expressible in sh; apptainer's own conversion fails on these
        if not sep:
            lines.append(f'export {name}="${{{name}:-}}"')
        elif name == "PATH":
            lines.append(f'export PATH="{_dq(value)}"')
        else:
            lines.append(f'export {name}="${{{name}:-{_dq(value)}}}"')
    return "\n".join(lines) + "\n"


def _sq(word: str) -> str:
    return "'" + word.replace("'", "'\"'\"'") + "'"


def oci_runscript(config: ImageConfig) -> str:
    """The runscript of an OCI image: ENTRYPOINT + (arguments, else CMD run in WORKDIR)."""
    lines = ["#!/bin/sh", "# from the image's ENTRYPOINT and CMD (OCI semantics: arguments replace CMD)"]
    if config.cmd or config.workdir:
        lines.append('if [ "$#" -eq 0 ]; then')
        if config.workdir:
            lines.append(f"    cd {_sq(config.workdir)} || exit 1")
        if config.cmd:
            lines.append("    set -- " + " ".join(_sq(w) for w in config.cmd))
        lines.append("fi")
    if config.entrypoint:
        lines.append("set -- " + " ".join(_sq(w) for w in config.entrypoint) + ' "$@"')
    lines += [
        'if [ "$#" -eq 0 ]; then',
        '    echo "This image has no ENTRYPOINT or CMD: give a command (apptainer run IMAGE CMD ...)" >&2',
        "    exit 1",
        "fi",
        'exec "$@"',
    ]
    return "\n".join(lines) + "\n"


def _go_json(data: Any, indent: str | None = None) -> str:
    """JSON as Go's encoding/json writes it (maps sorted, <, >, & escaped)."""
    text = json.dumps(data, indent=indent, sort_keys=True, ensure_ascii=False,
                      separators=(",", ": ") if indent else (",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_date(t: int) -> str:
    """``org.label-schema.build-date`` as apptainer formats it: ``Sunday_22_November_2026_12:2:15_UTC``."""
    g = time.gmtime(t)
    return f"{time.strftime('%A', g)}_{g.tm_mday}_{time.strftime('%B', g)}_{g.tm_year}_" \
           f"{g.tm_hour}:{g.tm_min}:{g.tm_sec}_UTC"


def sif_labels(config: ImageConfig, header: Mapping[str, str]) -> dict[str, str]:
    """The image's labels plus the build labels apptainer adds (schema, dates, bootstrap header, arch)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(config.created))
    labels = dict(config.labels)
    labels.update({
        "org.label-schema.schema-version": "1.0",
        "org.opencontainers.image.created": created,
        "org.label-schema.build-date": build_date(config.created),
        "org.opencontainers.image.architecture": config.arch,
        "org.label-schema.build-arch": config.arch,
        "io.torchkiln.sif-writer": f"torchkiln {__version__}",
    })
    for k, v in header.items():
        labels[f"org.label-schema.usage.singularity.deffile.{k}"] = v
    return labels


def deffile_header(text: str) -> dict[str, str]:
    """The header keys of a definition file (lower-cased, comments dropped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("%"):
            break
        if not s or s.startswith("#") or ":" not in s:
            continue
        k, _, v = s.split("#", 1)[0].partition(":")
        out[k.strip().lower()] = v.strip()
    return out


def _layout_folder(conf: Confined, rel: str, *, replace: bool) -> int | None:
    """A descriptor of the real folder ``rel`` of the root (made where missing); a component that is a symlink or
    a file is replaced by a folder (``replace``: apptainer's own ``/.singularity.d``) or makes it None (an image's
    ``/etc`` symlink is the image's: left alone). Never follows a symlink."""
    fd = os.dup(conf.fd)
    try:
        for part in rel.split("/"):
            st = _lstat_at(part, fd)
            if st is None or not stat.S_ISDIR(st.st_mode):
                if st is not None:
                    if not replace:
                        os.close(fd)
                        return None
                    remove_at(fd, part)
                os.mkdir(part, 0o755, dir_fd=fd)
            nfd = os.open(part, _DIR_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _lstat_at(name: str, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _write(conf: Confined, rel: str, text: str, mode: int, *, replace: bool = True) -> None:
    """Write ``rel`` of the root (whatever was there replaced, no symlink followed)."""
    folder, name = os.path.split(rel)
    fd = _layout_folder(conf, folder, replace=replace)
    if fd is None:
        return
    try:
        remove_at(fd, name)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(out, data):]
            os.fchmod(out, mode)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _stamp_layout(conf: Confined, created: int) -> None:
    """Give what the layout wrote (and the folders it changed) the image's creation time.

    The same rootfs and config then squash to the same bytes (the files' times are in the squashfs),
    while the image's own files keep theirs: a ``.pyc`` checked against its source's time stays valid.
    Every path is reached through real folders only (no symlink followed), iteratively.
    """
    stamp = (created, created)
    os.utime(conf.fd, stamp)
    touched = [".singularity.d", "etc", *SYMLINKS, *ROOT_DIRS, "etc/hosts", "etc/resolv.conf"]
    pending: list[list[str]] = [[".singularity.d"]]
    while pending:  # everything under /.singularity.d, without recursion
        names = pending.pop()
        fd = conf.open_real(names)
        if fd is None:
            continue
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    touched.append("/".join([*names, entry.name]))
                    if entry.is_dir(follow_symlinks=False):
                        pending.append([*names, entry.name])
        finally:
            os.close(fd)
    for rel in touched:
        folder, name = os.path.split(rel)
        fd = conf.open_real(folder.split("/")) if folder else os.dup(conf.fd)
        if fd is None:
            continue
        try:
            if _lstat_at(name, fd) is not None:
                os.utime(name, stamp, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)


def add_singularity_layout(rootfs: Path, config: ImageConfig, deffile: str) -> dict[str, Any]:
    """Write ``/.singularity.d`` (and the root symlinks) into ``rootfs``; returns the inspect metadata.

    Every write goes through :mod:`torchkiln.images.confine`-style descriptors of ``rootfs``: an image whose
    ``/.singularity.d`` or ``/etc`` is a symlink (to ``/``, say) changes nothing outside ``rootfs``."""
    with Confined(rootfs) as conf:
        for d in ROOT_DIRS:
            fd = _layout_folder(conf, d, replace=False)  # an image's own symlink (var/tmp -> /tmp) is kept
            if fd is not None:
                os.close(fd)
        for d in (".singularity.d/libs", ".singularity.d/actions", ".singularity.d/env"):
            fd = _layout_folder(conf, d, replace=True)
            if fd is not None:
                os.close(fd)
        for name, target in SYMLINKS.items():
            if _lstat_at(name, conf.fd) is None:
                os.symlink(target, name, dir_fd=conf.fd)
        for name in ("hosts", "resolv.conf"):
            _write(conf, f"etc/{name}", "", 0o644, replace=False)
        for name, text in ACTIONS.items():
            _write(conf, f".singularity.d/actions/{name}", text, 0o755)
        for name, text in ENV_SCRIPTS.items():
            _write(conf, f".singularity.d/env/{name}", text, 0o755)
        _write(conf, ".singularity.d/env/10-docker2singularity.sh", docker_env_script(config.env), 0o755)
        runscript = oci_runscript(config)
        _write(conf, ".singularity.d/runscript", runscript, 0o755)
        _write(conf, ".singularity.d/startscript", STARTSCRIPT, 0o755)
        labels = sif_labels(config, deffile_header(deffile))
        _write(conf, ".singularity.d/labels.json", _go_json(labels, indent="\t"), 0o644)
        _write(conf, ".singularity.d/Singularity", deffile, 0o644)
        _stamp_layout(conf, config.created)
    return {
        "data": {
            "attributes": {
                "environment": {"/.singularity.d/env/90-environment.sh": ENV_SCRIPTS["90-environment.sh"]},
                "labels": labels,
                "runscript": runscript,
                "deffile": deffile,
                "startscript": STARTSCRIPT,
            }
        },
        "type": "container",
    }


def mksquashfs(
    rootfs: Path, dest: Path, runner: Runner, *, created: int, processors: int | None = None,
    compression: str | None = None,
) -> Path:
    """Squash ``rootfs`` into ``dest`` (apptainer's flags: ``-noappend``, ``-all-root`` unless root)."""
    cmd: list[str | os.PathLike[str]] = ["mksquashfs", rootfs, dest, "-noappend", "-quiet",
                                         "-mkfs-time", str(created)]
    if os.geteuid() != 0:
        cmd.append("-all-root")
    if processors:
        cmd += ["-processors", str(processors)]
    if compression:
        cmd += ["-comp", compression]
    if shutil.which("mksquashfs") is None:
        raise ToolMissingError("`mksquashfs` is not installed (not found on PATH); it makes the SIF's file system.",
                               hint=MKSQUASHFS_HINT)
    runner.run(
        cmd, what="mksquashfs", install_hint=MKSQUASHFS_HINT,
        error=lambda m, h, d: InputError(m, h or "Check the free space next to the output file.", details=d),
        classify=lambda r: disk_full(r.output, f"$ {r.command}\n{r.tail(10)}"),
    )
    with dest.open("rb") as f:
        if f.read(4) != SQUASHFS_MAGIC:
            raise InputError(f"mksquashfs wrote no squashfs file at {dest}.")
    return dest


def image_uuid(*parts: str) -> uuid.UUID:
    """A stable id for a SIF made from the same inputs (uuid5 in a torchkiln namespace)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "torchkiln-sif:" + "\0".join(parts))


def write_image_sif(
    rootfs: Path,
    dest: Path,
    config: ImageConfig,
    deffile: str,
    runner: Runner,
    *,
    image_id: str = "",
    processors: int | None = None,
    compression: str | None = None,
) -> SifImage:
    """Make ``dest`` from a flattened root file system, the way ``apptainer build`` lays it out.

    Adds ``/.singularity.d`` to ``rootfs`` (which is modified), squashes it next to ``dest``, and
    writes the Deffile, ``inspect-metadata.json``, ``oci-config.json`` and the PrimSys partition.
    """
    metadata = add_singularity_layout(rootfs, config, deffile)
    if config.arch not in ARCH_CODES:
        raise InputError(f"image architecture {config.arch!r} has no SIF code.")
    with tempfile.TemporaryDirectory(prefix=".kiln-sqfs-", dir=dest.parent) as tmp:
        squash = mksquashfs(rootfs, Path(tmp) / "rootfs.squashfs", runner, created=config.created,
                            processors=processors, compression=compression)
        objects = [
            SifObject(DataType.DEFFILE, data=deffile.encode()),
            SifObject(DataType.GENERIC_JSON, INSPECT_METADATA, data=_go_json(metadata).encode()),
            SifObject(DataType.GENERIC_JSON, OCI_CONFIG, data=_go_json(dict(config.raw)).encode()),
            SifObject(DataType.PARTITION, path=squash, fs_type=FsType.SQUASHFS, part_type=PartType.PRIMSYS,
                      arch=config.arch),
        ]
        return write_sif(dest, objects, image_id=image_uuid(image_id or deffile, str(config.created)),
                         created=config.created)
