"""Offline base images: ``kiln base bootstrap`` without any container registry.

``debootstrap --variant=minbase`` of a Debian or Ubuntu suite with Python, trimmed (no apt lists,
no package caches, no docs or man pages, and a dpkg rule that keeps later installs from adding
them back), packed with ``tar`` and imported into the engine under a tag. The image is cached by
that tag: a second bootstrap returns at once unless ``force`` is given.

``platform`` "linux/arm64" bootstraps an arm64 root (``debootstrap --arch arm64``) and imports it
recorded as arm64, tagged ``kiln-base:SUITE-arm64``; on an x86_64 host debootstrap's second stage
runs through qemu-user (``torchkiln.building.emulation`` checks for it first).

The mirror comes from a flag, else from the host's apt configuration (the first ``deb`` source
that serves the suite), else debootstrap's own default for the suite. Parsing apt's two source
formats (one-line ``.list`` and deb822 ``.sources``) is our own small code: no library on the
package index reads them without pulling in python-apt, which is not installable with pip.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchkiln.building.emulation import (
    DEFAULT_PLATFORM,
    MACHINE,
    OFFLINE_BASE,
    arch_of,
    check_platform,
    host_platform,
    platform_suffix,
    require_emulation,
)
from torchkiln.cache import kiln_cache_dir
from torchkiln.contract import BASE_LABEL_PREFIX
from torchkiln.engines import Engine, StoreEngine, require_store
from torchkiln.errors import BuildError, EngineMissingError, InputError
from torchkiln.images.rootfs import write_docker_archive
from torchkiln.runner import Runner

DEFAULT_SUITE = "bookworm"
DEFAULT_PACKAGES = ("python3",)

DEBIAN_SUITES = frozenset(
    {"buster", "bullseye", "bookworm", "trixie", "forky", "sid", "stable", "testing", "unstable", "oldstable"}
)
UBUNTU_SUITES = frozenset({"focal", "jammy", "noble", "oracular", "plucky", "questing"})

#: files that a runtime base does not need, removed after debootstrap (relative to the root)
TRIM = (
    "var/cache/apt/archives",
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/srcpkgcache.bin",
    "var/lib/apt/lists",
    "usr/share/man",
    "usr/share/groff",
    "usr/share/info",
    "usr/share/lintian",
    "var/log",
    "var/cache/debconf/templates.dat-old",
    "var/lib/dpkg/status-old",
)

DPKG_EXCLUDES = """\
# Written by torchkiln: keep documentation out of this image, as the official slim images do.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""

APT_CLEAN = """\
# Written by torchkiln: no package cache in image layers.
APT::Keep-Downloaded-Packages "false";
Binary::apt::APT::Keep-Downloaded-Packages "false";
"""


@dataclass(frozen=True)
class AptSource:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_one_line_sources(text: str) -> list[AptSource]:
    """``deb [options] URI suite [component…]`` lines (``sources.list`` and ``*.list``)."""
    out: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        line = re.sub(r"\[[^\]]*\]\s*", "", line)  # drop [arch=amd64 signed-by=…]
        parts = line.split()
        if len(parts) < 3 or parts[0] not in ("deb", "deb-src"):
            continue
        out.append(AptSource((parts[0],), (parts[1],), (parts[2],), tuple(parts[3:])))
    return out


def parse_deb822_sources(text: str) -> list[AptSource]:
    """deb822 stanzas (``*.sources``): ``Types:``, ``URIs:``, ``Suites:``, ``Components:``, ``Enabled:``."""
    out: list[AptSource] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for raw in stanza.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1].isspace() and key is not None:
                fields[key] += " " + raw.strip()
                continue
            if ":" in raw:
                key, _, value = raw.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
            continue
        out.append(
            AptSource(
                tuple(fields.get("types", "deb").split()),
                tuple(fields["uris"].split()),
                tuple(fields.get("suites", "").split()),
                tuple(fields.get("components", "").split()),
            )
        )
    return out


def mirror_for_suite(sources: Iterable[AptSource], suite: str) -> str | None:
    """The first ``deb`` URI that serves ``suite`` exactly."""
    for s in sources:
        if "deb" in s.types and suite in s.suites and s.uris:
            return s.uris[0]
    return None


def host_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every apt source configured on this host (missing files are skipped)."""
    found: list[AptSource] = []
    main = etc_apt / "sources.list"
    if main.is_file():
        found += parse_one_line_sources(main.read_text(errors="replace"))
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        for f in sorted(parts.iterdir()):
            if f.suffix == ".list":
                found += parse_one_line_sources(f.read_text(errors="replace"))
            elif f.suffix == ".sources":
                found += parse_deb822_sources(f.read_text(errors="replace"))
    return found


def distro_of(suite: str) -> str:
    if suite in DEBIAN_SUITES:
        return "debian"
    if suite in UBUNTU_SUITES:
        return "ubuntu"
    return "unknown"


def default_tag(suite: str, packages: Sequence[str] = DEFAULT_PACKAGES, platform: str = DEFAULT_PLATFORM) -> str:
    """``kiln-base:bookworm``; extra packages add a short digest (``kiln-base:bookworm-3f2a9c1d``), a
    platform other than linux/amd64 its architecture last (``kiln-base:bookworm-arm64``)."""
    extra = sorted(set(packages) - set(DEFAULT_PACKAGES))
    suffix = platform_suffix(platform)
    if not extra:
        return f"{OFFLINE_BASE}:{suite}{suffix}"
    digest = hashlib.sha256(",".join(sorted(set(packages))).encode()).hexdigest()[:8]
    return f"{OFFLINE_BASE}:{suite}-{digest}{suffix}"


@dataclass(frozen=True)
class BaseRequest:
    suite: str = DEFAULT_SUITE
    mirror: str | None = None
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    tag: str | None = None
    variant: str = "minbase"
    platform: str = DEFAULT_PLATFORM

    @property
    def image(self) -> str:
        return self.tag or default_tag(self.suite, self.packages, self.platform)


@dataclass(frozen=True)
class BaseResult:
    image: str
    created: bool  # False: it already existed (cache hit)
    seconds: float
    size: int
    python: str | None
    mirror: str | None
    suite: str
    platform: str = DEFAULT_PLATFORM

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "created": self.created,
            "cached": not self.created,
            "seconds": round(self.seconds, 2),
            "size_bytes": self.size,
            "python": self.python,
            "mirror": self.mirror,
            "suite": self.suite,
            "platform": self.platform,
        }


def trim_rootfs(root: Path) -> None:
    """Remove caches and docs, and configure dpkg/apt to keep them out of later layers."""
    for rel in TRIM:
        p = root / rel
        if p.is_dir() and not p.is_symlink():
            for child in p.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        elif p.exists() or p.is_symlink():
            p.unlink()
    doc = root / "usr/share/doc"
    if doc.is_dir():  # keep the copyright files (licences), drop the rest
        for f in sorted(doc.rglob("*"), reverse=True):
            if f.name == "copyright" and f.parent.parent == doc:
                continue
            if f.is_dir() and not f.is_symlink():
                if not any(f.iterdir()):
                    f.rmdir()
            else:
                f.unlink()
    locale = root / "usr/share/locale"
    if locale.is_dir():
        for child in locale.iterdir():
            if child.name == "locale.alias":
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (root / "var/log").mkdir(parents=True, exist_ok=True)
    dpkg = root / "etc/dpkg/dpkg.cfg.d"
    dpkg.mkdir(parents=True, exist_ok=True)
    (dpkg / "torchkiln-nodoc").write_text(DPKG_EXCLUDES)
    apt = root / "etc/apt/apt.conf.d"
    apt.mkdir(parents=True, exist_ok=True)
    (apt / "torchkiln-clean").write_text(APT_CLEAN)


def rootfs_python(root: Path) -> str | None:
    """The version ``python3`` points to in the rootfs ("3.11"), or None."""
    link = root / "usr/bin/python3"
    if not link.is_symlink() and not link.exists():
        return None
    try:
        target = os.readlink(link) if link.is_symlink() else link.name
    except OSError:
        return None
    m = re.search(r"python(3\.\d+)", target)
    return m.group(1) if m else None


def write_apt_sources(root: Path, suite: str, mirror: str | None) -> None:
    """Point the image's apt at the mirror it was bootstrapped from (for apt packages in builds)."""
    if mirror is None:
        return
    components = "main"
    (root / "etc/apt/sources.list").write_text(f"deb {mirror} {suite} {components}\n")


def base_store(engine: Engine) -> StoreEngine:
    """The engine as the image store a base is imported into; an InputError for engines without one."""
    return require_store(
        engine, "import a bootstrapped base",
        "Bootstrap with docker or podman (--engine docker), write it as a file with `kiln export "
        "kiln-base:bookworm --format oci-archive -o base.tar`, and build with `kiln build SPEC "
        "--engine apptainer --bootstrap oci-archive --from base.tar`.",
    )


def bootstrap(
    engine: Engine,
    request: BaseRequest,
    *,
    runner: Runner | None = None,
    force: bool = False,
    workdir: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    etc_apt: Path = Path("/etc/apt"),
    package_cache: Path | None = None,
) -> BaseResult:
    """Create (or find, cached by tag) the base image ``request.image`` in ``engine``.

    Downloaded .deb files are kept in ``package_cache`` (default: the torchkiln cache folder), so
    bootstrapping the same suite again (for another engine, or with ``force``) downloads nothing.
    """
    store = base_store(engine)  # refused before debootstrap runs, not after
    runner = runner or engine.runner
    image = request.image
    platform = check_platform(request.platform)
    arch = arch_of(platform)
    start = time.monotonic()
    if not force and engine.image_exists(image):
        details = engine.inspect_image(image)
        python = details.labels.get(f"{BASE_LABEL_PREFIX}.python")
        # without our python label the tag holds something else (or a base an older torchkiln
        # labelled differently): make it again rather than plan builds on an unknown Python; the
        # same when the tag holds another architecture's root
        if python and details.architecture in ("", arch):
            return BaseResult(
                image, False, time.monotonic() - start, details.size,
                python, details.labels.get(f"{BASE_LABEL_PREFIX}.mirror"), request.suite, platform,
            )
    debootstrap = runner.which(
        "debootstrap",
        install_hint="Install debootstrap (Debian/Ubuntu: `apt-get install debootstrap`), or load a base image "
        "made elsewhere with `docker load` / `podman load` and name it as `image` in the spec's `base` table.",
    )
    if os.geteuid() != 0:
        raise EngineMissingError(
            "`kiln base bootstrap` needs root: debootstrap creates device nodes and files owned by other users.",
            hint="Run it with sudo (`sudo kiln base bootstrap`); the image it imports is then usable by everyone.",
        )
    # debootstrap's second stage runs the new root's programs: an arm64 root on x86_64 needs qemu
    require_emulation(platform, "`kiln base bootstrap`")
    mirror = request.mirror or mirror_for_suite(host_apt_sources(etc_apt), request.suite)
    with tempfile.TemporaryDirectory(prefix="kiln-base-", dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        debs = (package_cache or kiln_cache_dir() / "debootstrap") / f"{request.suite}-{MACHINE[arch]}"
        debs.mkdir(parents=True, exist_ok=True)
        cmd = [
            debootstrap,
            f"--arch={arch}",
            f"--cache-dir={debs.resolve()}",
            f"--variant={request.variant}",
            f"--include={','.join(request.packages)}",
            request.suite,
            str(root),
        ]
        if mirror:
            cmd.append(mirror)
        runner.run(
            cmd,
            on_line=on_line or (lambda _line: None),
            what=f"debootstrap {request.suite}",
            hint=(
                "Check the suite name and the mirror (--mirror URL); an Ubuntu suite on a Debian host needs "
                "`apt-get install ubuntu-keyring` and an Ubuntu mirror."
            ),
            error=lambda m, h, d: BuildError(m, h, details=d),
        )
        python = rootfs_python(root)
        if python is None:
            raise BuildError(
                f"the bootstrapped {request.suite} root has no python3.",
                hint="Keep python3 in the package list (--package python3).",
            )
        trim_rootfs(root)
        write_apt_sources(root, request.suite, mirror)
        tarball = Path(tmp) / "rootfs.tar"
        runner.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(tarball), "."],
            what="tar of the root filesystem",
        )
        labels = {
            f"{BASE_LABEL_PREFIX}.suite": request.suite,
            f"{BASE_LABEL_PREFIX}.distro": distro_of(request.suite),
            f"{BASE_LABEL_PREFIX}.python": python,
            f"{BASE_LABEL_PREFIX}.packages": ",".join(request.packages),
            f"{BASE_LABEL_PREFIX}.mirror": mirror or "debootstrap default",
            f"{BASE_LABEL_PREFIX}.platform": platform,
        }
        env = ("LANG=C.UTF-8", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        entry = ("/bin/bash",)
        if platform == host_platform():
            changes = [
                *(f"ENV {e}" for e in env),
                "CMD " + json.dumps(list(entry)),
                *(f'LABEL {k}="{v}"' for k, v in labels.items()),
            ]
            store.import_tar(tarball, image, changes=changes)
        else:
            # `docker import --platform` records the platform on experimental daemons only: write the
            # image (config with its architecture, the tar as its layer) and load it instead
            archive = write_docker_archive(tarball, Path(tmp) / "image.tar", image, platform, env=env, cmd=entry,
                                           labels=labels, comment=f"kiln base bootstrap ({request.suite}, {platform})")
            tarball.unlink()
            store.load(archive)
    details = engine.inspect_image(image)
    if details.architecture and details.architecture != arch:
        engine.remove_image(image)  # a base of the wrong architecture would fail every build on it
        raise BuildError(
            f"{engine.name} recorded {image} as {details.platform}, not {platform}.",
            hint=f"Upgrade {engine.name}, or load the image made elsewhere (`{engine.name} load -i FILE`).",
        )
    return BaseResult(image, True, time.monotonic() - start, details.size, python, mirror, request.suite, platform)


def base_python(engine: Engine, image: str) -> str | None:
    """The Python version a torchkiln base records in its labels (None for other images)."""
    try:
        return engine.inspect_image(image).labels.get(f"{BASE_LABEL_PREFIX}.python")
    except InputError:
        return None
