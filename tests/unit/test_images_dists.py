"""The venv's distributions read from layer folders: the overlay rules for the few files needed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from torchkiln.images.dists import resolve, venv_distributions

SITE = "opt/venv/lib/python3.11/site-packages"


def put(layer: Path, rel: str, text: str = "") -> None:
    p = layer / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def meta(name: str, version: str, license_: str = "") -> str:
    return f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n" + (
        f"License-Expression: {license_}\n" if license_ else "") + "\nThe long description.\n"


def test_topmost_copy_wins_and_deletions_hide_lower_layers(tmp_path: Path) -> None:
    base, mid, top = (tmp_path / n for n in ("base", "mid", "top"))
    put(base, "opt/venv/pyvenv.cfg", "home = /usr/bin\n")
    put(base, f"{SITE}/alpha-1.0.dist-info/METADATA", meta("Alpha", "1.0", "MIT"))
    put(base, f"{SITE}/alpha-1.0.dist-info/RECORD", "alpha/__init__.py,,\r\n")
    put(base, f"{SITE}/beta-2.0.dist-info/METADATA", meta("beta", "2.0"))
    put(mid, f"{SITE}/alpha-1.0.dist-info/RECORD", "alpha/__init__.py,,\nalpha/x.py,,\n")  # RECORD only
    put(mid, f"{SITE}/.wh.beta-2.0.dist-info")  # beta uninstalled
    put(top, f"{SITE}/gamma-3.0.dist-info/METADATA", meta("Gamma", "3.0"))
    dists = venv_distributions([base, mid, top])
    sha = hashlib.sha256(b"alpha/__init__.py,,\nalpha/x.py,,\n").hexdigest()
    assert dists == [
        {"name": "Alpha", "version": "1.0", "license": "MIT", "record_sha256": sha},
        {"name": "Gamma", "version": "3.0", "license": "", "record_sha256": ""},
    ]
    # universal newlines, as importlib.metadata reads RECORD
    assert venv_distributions([base])[0]["record_sha256"] == hashlib.sha256(b"alpha/__init__.py,,\n").hexdigest()


def test_a_deleted_folder_on_the_way_hides_everything_below(tmp_path: Path) -> None:
    base, top = tmp_path / "base", tmp_path / "top"
    put(base, "opt/venv/pyvenv.cfg")
    put(base, f"{SITE}/alpha-1.0.dist-info/METADATA", meta("alpha", "1.0"))
    put(top, "opt/venv/lib/.wh.python3.11")
    put(top, "opt/venv/pyvenv.cfg")
    assert resolve([base, top], f"{SITE}/alpha-1.0.dist-info/METADATA") is None
    assert venv_distributions([base, top]) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a 0/0 character device (overlay's whiteout) needs root")
def test_overlay_whiteouts_and_opaque_folders(tmp_path: Path) -> None:
    base, top = tmp_path / "base", tmp_path / "top"
    put(base, "opt/venv/pyvenv.cfg")
    put(base, f"{SITE}/alpha-1.0.dist-info/METADATA", meta("alpha", "1.0"))
    put(base, f"{SITE}/beta-2.0.dist-info/METADATA", meta("beta", "2.0"))
    (top / SITE).mkdir(parents=True)
    os.mknod(top / SITE / "beta-2.0.dist-info", 0o600 | 0o020000, os.makedev(0, 0))
    assert [d["name"] for d in venv_distributions([base, top]) or []] == ["alpha"]
    try:
        os.setxattr(top / SITE, "trusted.overlay.opaque", b"y")
    except OSError:
        pytest.skip("this file system takes no trusted.* extended attributes")
    assert venv_distributions([base, top]) == []


def test_an_image_without_the_venv_has_no_answer(tmp_path: Path) -> None:
    put(tmp_path / "l", "usr/lib/python3/dist-packages/x-1.dist-info/METADATA", meta("x", "1"))
    assert venv_distributions([tmp_path / "l"]) is None
