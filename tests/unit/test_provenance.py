"""Provenance labels and the CycloneDX SBOM, without an engine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from torchkiln.provenance import (
    clean_remote,
    created_time,
    git_facts,
    make_sbom,
    provenance_labels,
    sbom_summary,
)
from torchkiln.runner import Runner

DISTS = [
    {"name": "torch", "version": "2.13.0+cu130", "license": "", "record_sha256": "e" * 64},
    {"name": "nvidia-cublas", "version": "13.1.0.3", "license": "", "record_sha256": "f" * 64},
    {"name": "six", "version": "1.16.0", "license": "", "record_sha256": ""},
]


def test_labels_leave_out_what_is_unknown() -> None:
    labels = provenance_labels(version="1.0", base="python:3.11-slim", base_digest="", created="2026-01-01T00:00:00Z",
                               revision="abc", source="")
    assert labels == {
        "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
        "org.opencontainers.image.version": "1.0",
        "org.opencontainers.image.base.name": "python:3.11-slim",
        "org.opencontainers.image.revision": "abc",
    }


def test_created_is_reproducible(tmp_path: Path) -> None:
    spec = tmp_path / "kiln.toml"
    spec.write_text("")
    os.utime(spec, (1700000000, 1700000000))
    assert created_time(spec, None, {"SOURCE_DATE_EPOCH": "86400"}) == "1970-01-02T00:00:00Z"
    assert created_time(spec, 1600000000, {}) == "2020-09-13T12:26:40Z"
    assert created_time(spec, None, {}) == "2023-11-14T22:13:20Z"


def test_a_remote_url_loses_its_credentials() -> None:
    assert clean_remote("https://user:ghp_" + "x" * 36 + "@github.com/acme/app.git\n") == "https://github.com/acme/app.git"
    assert clean_remote("git@github.com:acme/app.git") == "git@github.com:acme/app.git"


def test_git_facts_of_a_checkout_and_of_no_checkout(tmp_path: Path) -> None:
    assert git_facts(tmp_path, Runner()) == ("", "", None)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_COMMITTER_DATE": "1600000000 +0000"}
    for cmd in (["init", "-q"], ["remote", "add", "origin", "https://u:secret-pw@git.example/acme/app.git"]):
        subprocess.run(["git", "-C", str(tmp_path), *cmd], check=True, env=env)
    (tmp_path / "kiln.toml").write_text("")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-qm", "x"], check=True, env=env)
    rev, source, when = git_facts(tmp_path, Runner())
    assert len(rev) == 40 and source == "https://git.example/acme/app.git" and when == 1600000000
    (tmp_path / "kiln.toml").write_text("changed")
    rev2, _, when2 = git_facts(tmp_path, Runner())
    assert rev2 == rev + "-dirty" and when2 is None


def test_the_sbom_lists_every_distribution_with_purl_and_hashes() -> None:
    locked = {("torch", "2.13.0+cu130"): ["a" * 64]}
    text = make_sbom(image="acme/app:1", image_id="sha256:" + "b" * 64, labels={"org.opencontainers.image.version": "1"},
                     distributions=DISTS, locked=locked)
    assert text == make_sbom(image="acme/app:1", image_id="sha256:" + "b" * 64,
                             labels={"org.opencontainers.image.version": "1"}, distributions=DISTS, locked=locked)
    data = json.loads(text)
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.6"
    assert data["metadata"]["component"]["name"] == "acme/app" and data["metadata"]["component"]["type"] == "container"
    purls = sorted(c["purl"] for c in data["components"])
    assert purls == ["pkg:pypi/nvidia-cublas@13.1.0.3", "pkg:pypi/six@1.16.0", "pkg:pypi/torch@2.13.0%2Bcu130"]
    summary = {c["name"]: c for c in sbom_summary(text)["components"]}
    assert summary["torch"]["sha256"] == ["a" * 64] and summary["six"]["sha256"] == []
    assert summary["nvidia-cublas"]["cuda"] and not summary["torch"]["cuda"]
