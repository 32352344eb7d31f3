"""Foreign platforms: names, the offline bases' tag per platform, and whether this host can run another
CPU architecture's programs.

An arm64 image is built on an x86_64 host by running its programs (debootstrap's second stage,
every ``RUN`` of a build) through qemu-user, which the kernel starts by itself for aarch64 ELF files
once binfmt_misc has a ``qemu-aarch64`` handler. The handler needs the ``F`` flag (the kernel opens
the interpreter when it is registered), because the programs run in a chroot or a container where
the host's ``/usr/libexec/qemu-binfmt/`` does not exist. Debian's qemu-user-static registers it so.

Reading ``/proc/sys/fs/binfmt_misc`` is our own few lines: no maintained library reads it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from torchkiln.errors import InputError, ToolMissingError

#: the platforms torchkiln builds: OCI platform -> Debian architecture (debootstrap --arch)
DEBIAN_ARCH: dict[str, str] = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
#: OCI/Debian architecture -> the machine name the kernel reports (``uname -m``, qemu's name)
MACHINE: dict[str, str] = {"amd64": "x86_64", "arm64": "aarch64"}
#: the other way round
OCI_OF_MACHINE: dict[str, str] = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}

BINFMT = Path("/proc/sys/fs/binfmt_misc")

FIX = (
    "Install the emulator and register it (Debian/Ubuntu, as root): `apt-get install qemu-user-static "
    "binfmt-support`, then `mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc` if it is not mounted "
    "and `update-binfmts --enable qemu-{machine}`; scripts/quickstart.sh does all of it. In a container, "
    "the host must do it (binfmt_misc is the kernel's, not the container's)."
)


def check_platform(platform: str) -> str:
    """``platform`` if torchkiln builds it, else an InputError naming the ones it does."""
    if platform not in DEBIAN_ARCH:
        raise InputError(f"unknown platform {platform!r}.", hint=f"Use one of: {', '.join(DEBIAN_ARCH)}.")
    return platform


def arch_of(platform: str) -> str:
    """"linux/arm64" -> "arm64"."""
    return DEBIAN_ARCH[check_platform(platform)]


def host_platform() -> str:
    """This machine's OCI platform ("linux/amd64" on x86_64)."""
    machine = os.uname().machine
    return OCI_OF_MACHINE.get(machine, f"linux/{machine}")


def emulation_problem(platform: str, binfmt: Path = BINFMT, host: str | None = None) -> str | None:
    """Why programs of ``platform`` cannot run on this host; None when they can (natively or by qemu)."""
    host = host or host_platform()
    if platform == host:
        return None
    machine = MACHINE[arch_of(platform)]
    if not (binfmt / "status").exists():
        return f"binfmt_misc is not mounted at {binfmt}, so the kernel cannot hand {machine} programs to qemu"
    entry = binfmt / f"qemu-{machine}"
    try:
        text = entry.read_text()
    except OSError:
        return f"no qemu-{machine} handler is registered in binfmt_misc (qemu-user-static is missing or not enabled)"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        return f"the qemu-{machine} handler of binfmt_misc is disabled"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the qemu-{machine} handler has no F (fix binary) flag, so it cannot start inside a chroot or "
                "container (the qemu-user package instead of qemu-user-static registered it)")
    return None


def builds_here(env: Mapping[str, str]) -> bool:
    """Whether an engine with this environment builds on this machine (whose binfmt_misc is read):
    not another daemon (DOCKER_HOST other than a unix socket, a docker context, a buildx builder,
    podman's CONTAINER_HOST), whose kernel has its own emulation or none."""
    host = env.get("DOCKER_HOST") or ""
    context = env.get("DOCKER_CONTEXT") or ""
    return ((not host or host.startswith("unix://")) and context in ("", "default")
            and not env.get("BUILDX_BUILDER") and not env.get("CONTAINER_HOST"))


def require_emulation(platform: str, what: str, binfmt: Path = BINFMT, host: str | None = None) -> None:
    """Raise ToolMissingError (exit 11) with the fix when ``platform``'s programs cannot run here."""
    problem = emulation_problem(platform, binfmt, host)
    if problem is None:
        return
    machine = MACHINE[arch_of(platform)]
    raise ToolMissingError(
        f"{what} for {platform} runs {machine} programs on this {host or host_platform()} machine, but {problem}.",
        hint=FIX.format(machine=machine),
    )


# -- the offline bases' tags name their platform ---------------------------------------------------

#: an *offline base*: the image name of what ``kiln base bootstrap`` makes (not "the base image" of a plan,
#: which may be one, nor the Dockerfile's ``base`` stage, nor a vendor base that brings its own torch)
OFFLINE_BASE = "kiln-base"
DEFAULT_PLATFORM = "linux/amd64"


def platform_suffix(platform: str) -> str:
    """The tag suffix of a base for ``platform``: "" for linux/amd64, "-arm64" for linux/arm64."""
    return "" if platform == DEFAULT_PLATFORM else f"-{arch_of(platform)}"


def platform_flag(platform: str) -> str:
    """`` --platform linux/arm64`` for a command a user types (``kiln base bootstrap``), "" for the default."""
    return "" if platform == DEFAULT_PLATFORM else f" --platform {platform}"


def base_for_platform(image: str, platform: str) -> str:
    """The bootstrapped base of ``platform`` that corresponds to ``image``.

    ``kiln-base:bookworm`` (or any ``kiln-base`` tag) names the amd64 base; an arm64 plan builds on
    its sibling ``kiln-base:bookworm-arm64``, so one ``--base`` (or ``[base] image``) serves both
    platforms. Other images are returned as they are: multi-platform images (python:3.11-slim-bookworm)
    are resolved by the engine for the build's --platform.
    """
    suffix = platform_suffix(platform)
    name, sep, tag = image.rpartition(":")
    if not suffix or name != OFFLINE_BASE or not sep or tag.endswith(suffix):
        return image
    return f"{image}{suffix}"
