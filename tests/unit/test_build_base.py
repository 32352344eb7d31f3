"""Offline base bootstrap: apt source parsing, mirror choice, tags, trimming a root filesystem."""

from __future__ import annotations

from pathlib import Path

from torchkiln.building.bootstrap import (
    BaseRequest,
    default_tag,
    distro_of,
    host_apt_sources,
    mirror_for_suite,
    parse_deb822_sources,
    parse_one_line_sources,
    rootfs_python,
    trim_rootfs,
    write_apt_sources,
)

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.invalid/debian
Suites: trixie
Components: main

Types: deb
URIs: http://disabled.invalid/debian
Suites: trixie
Enabled: no
"""

ONE_LINE = """\
# comment
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://one.invalid/ubuntu noble main universe
deb-src http://one.invalid/ubuntu noble main
deb http://one.invalid/ubuntu noble-updates main  # trailing comment
"""


def test_parse_deb822() -> None:
    sources = parse_deb822_sources(DEB822)
    assert len(sources) == 3  # the disabled stanza is dropped
    assert sources[0].uris == ("http://mirror.invalid/debian",)
    assert sources[0].suites == ("bookworm", "bookworm-updates")
    assert mirror_for_suite(sources, "bookworm") == "http://mirror.invalid/debian"
    assert mirror_for_suite(sources, "trixie") is None  # only deb-src or disabled


def test_parse_one_line() -> None:
    sources = parse_one_line_sources(ONE_LINE)
    assert [s.types for s in sources] == [("deb",), ("deb-src",), ("deb",)]
    assert sources[0].components == ("main", "universe")
    assert mirror_for_suite(sources, "noble") == "http://one.invalid/ubuntu"
    assert mirror_for_suite(sources, "noble-updates") == "http://one.invalid/ubuntu"
    assert mirror_for_suite(sources, "bookworm") is None


def test_host_apt_sources_reads_both_formats(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(ONE_LINE)
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list.d" / "ignored.list.disabled").write_text("deb http://x.invalid/ x main\n")
    found = host_apt_sources(tmp_path)
    assert mirror_for_suite(found, "bookworm") == "http://mirror.invalid/debian"
    assert mirror_for_suite(found, "noble") == "http://one.invalid/ubuntu"
    assert mirror_for_suite(found, "x") is None
    assert host_apt_sources(tmp_path / "missing") == []


def test_tags_and_distros() -> None:
    assert default_tag("bookworm") == "kiln-base:bookworm"
    assert default_tag("bookworm", ("python3", "python3")) == "kiln-base:bookworm"
    extra = default_tag("bookworm", ("python3", "libgl1"))
    assert extra.startswith("kiln-base:bookworm-") and len(extra.rsplit("-", 1)[1]) == 8
    assert extra == default_tag("bookworm", ("libgl1", "python3"))
    assert BaseRequest(suite="noble").image == "kiln-base:noble"
    assert BaseRequest(tag="my/base:1").image == "my/base:1"
    assert distro_of("bookworm") == "debian" and distro_of("noble") == "ubuntu" and distro_of("x") == "unknown"


def _fake_root(root: Path) -> None:
    for rel in (
        "var/lib/apt/lists/deb.invalid_dists_bookworm_InRelease",
        "var/cache/apt/archives/bash_5.2_amd64.deb",
        "var/cache/apt/pkgcache.bin",
        "usr/share/doc/bash/copyright",
        "usr/share/doc/bash/changelog.Debian.gz",
        "usr/share/man/man1/bash.1.gz",
        "usr/share/locale/de/LC_MESSAGES/bash.mo",
        "usr/share/locale/locale.alias",
        "var/log/dpkg.log",
        "usr/lib/python3.11/os.py",
    ):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").symlink_to("python3.11")


def test_trim_rootfs(tmp_path: Path) -> None:
    _fake_root(tmp_path)
    trim_rootfs(tmp_path)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink())
    assert files == [
        "etc/apt/apt.conf.d/torchkiln-clean",
        "etc/dpkg/dpkg.cfg.d/torchkiln-nodoc",
        "usr/bin/python3",
        "usr/lib/python3.11/os.py",
        "usr/share/doc/bash/copyright",
        "usr/share/locale/locale.alias",
    ]
    assert (tmp_path / "var/lib/apt/lists/partial").is_dir()
    assert "path-exclude /usr/share/man/*" in (tmp_path / "etc/dpkg/dpkg.cfg.d/torchkiln-nodoc").read_text()
    assert rootfs_python(tmp_path) == "3.11"
    assert rootfs_python(tmp_path / "empty") is None


def test_write_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "etc/apt").mkdir(parents=True)
    write_apt_sources(tmp_path, "bookworm", "http://mirror.invalid/debian")
    assert (tmp_path / "etc/apt/sources.list").read_text() == "deb http://mirror.invalid/debian bookworm main\n"
