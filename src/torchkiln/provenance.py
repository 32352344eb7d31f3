"""What is inside an image: OCI provenance labels and a CycloneDX SBOM.

- ``provenance_labels``: ``org.opencontainers.image.{created,revision,source,version,base.name,
  base.digest}`` (pure). They are passed to the engine as ``--label`` (they change the image
  config, never a build step's cache key). ``created`` follows the reproducible-builds convention so
  that the same inputs give the same image config: ``SOURCE_DATE_EPOCH`` when set, else the time of
  the spec's git commit (a clean tree), else the spec file's modification time. ``revision`` and
  ``source`` come from the spec's git checkout (the remote's URL without any user or password).
- ``make_sbom``: a CycloneDX 1.6 JSON document (``cyclonedx-python-lib``) of the image: one
  component per Python distribution found in the image's venv (torch, NVIDIA's CUDA library
  wheels, companions, packages), with its version, a ``pkg:pypi`` purl, and a hash — the locked
  wheel's sha256 for a ``--locked`` build, else (no wheel hash being known) the sha256 of the
  installed RECORD (which lists the hash of every installed file) as a property.
- The SBOM is written beside the image on this machine (``$KILN_CACHE_DIR/sbom/<image id>.cdx.json``)
  where ``kiln inspect IMAGE`` finds it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchkiln import __version__
from torchkiln.cache import kiln_cache_dir
from torchkiln.redact import redact
from torchkiln.runner import Runner

OCI = "org.opencontainers.image"

#: runs inside the image (stdlib only): every distribution of the venv, with its RECORD's sha256
SBOM_SCRIPT = r"""
import hashlib, importlib.metadata as m, json, sys
out = []
for d in m.distributions():
    rec = d.read_text("RECORD") or ""
    out.append({"name": d.metadata["Name"], "version": d.version, "license": d.metadata.get("License-Expression") or "",
                "record_sha256": hashlib.sha256(rec.encode()).hexdigest() if rec else ""})
json.dump(sorted(out, key=lambda x: (x["name"].lower(), x["version"])), sys.stdout)
"""


def created_time(spec_file: Path, commit_time: int | None, env: Mapping[str, str]) -> str:
    """RFC 3339 UTC: SOURCE_DATE_EPOCH, else the git commit's time, else the spec's mtime."""
    epoch: float
    sde = env.get("SOURCE_DATE_EPOCH", "")
    if sde.isdigit():
        epoch = int(sde)
    elif commit_time is not None:
        epoch = commit_time
    else:
        epoch = int(spec_file.stat().st_mtime)
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clean_remote(url: str) -> str:
    """A git remote as a label may show it: no user or password, never a token."""
    url = re.sub(r"^(\w+://)[^/@\s]*@", r"\1", url.strip())
    return redact(url)


def git_facts(spec_dir: Path, runner: Runner) -> tuple[str, str, int | None]:
    """(revision, source, commit time) of the spec's git checkout; empty when it is in none.

    The revision ends in ``-dirty`` when the checkout has changes (then the commit time is not used).
    """
    head = runner.run(["git", "-C", str(spec_dir), "rev-parse", "HEAD"], check=False) if _has_git() else None
    if head is None or head.returncode != 0:
        return "", "", None
    rev = head.stdout.strip()
    status = runner.run(["git", "-C", str(spec_dir), "status", "--porcelain", "--untracked-files=no"], check=False)
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    remote = runner.run(["git", "-C", str(spec_dir), "config", "--get", "remote.origin.url"], check=False)
    when = runner.run(["git", "-C", str(spec_dir), "log", "-1", "--format=%ct"], check=False)
    commit_time = int(when.stdout.strip()) if when.returncode == 0 and when.stdout.strip().isdigit() else None
    return (rev + ("-dirty" if dirty else ""), clean_remote(remote.stdout) if remote.returncode == 0 else "",
            None if dirty else commit_time)


def _has_git() -> bool:
    import shutil

    return shutil.which("git") is not None


def provenance_labels(*, version: str, base: str, base_digest: str, created: str, revision: str,
                      source: str) -> dict[str, str]:
    """The OCI annotations torchkiln sets on every image (empty values are left out)."""
    labels = {
        f"{OCI}.created": created,
        f"{OCI}.version": version,
        f"{OCI}.base.name": base,
        f"{OCI}.base.digest": base_digest,
        f"{OCI}.revision": revision,
        f"{OCI}.source": source,
    }
    return {k: v for k, v in labels.items() if v}


@dataclass(frozen=True)
class Provenance:
    """What an image's OCI labels say about where it came from, read once per spec (git, time)."""

    revision: str
    source: str
    created: str

    @classmethod
    def of(cls, spec_path: Path, runner: Runner, env: Mapping[str, str] | None = None) -> Provenance:
        """Read once per spec (a matrix shares one): the spec's git checkout and its ``created`` time."""
        from torchkiln.spec import spec_home

        spec_file = spec_home(spec_path)[0]  # kiln.toml, or the pyproject.toml of [tool.kiln]
        revision, source, commit_time = git_facts(spec_file.parent.resolve(), runner)
        return cls(revision, source, created_time(spec_file, commit_time, os.environ if env is None else env))

    def labels(self, version: str, base: str, base_digest: str) -> dict[str, str]:
        return provenance_labels(version=version, base=base, base_digest=base_digest, revision=self.revision,
                                 source=self.source, created=self.created)


def sbom_path(image_id: str) -> Path:
    """Where the SBOM of the image ``image_id`` is kept on this machine."""
    return kiln_cache_dir() / "sbom" / f"{image_id.removeprefix('sha256:')}.cdx.json"


def make_sbom(*, image: str, image_id: str, labels: Mapping[str, str], distributions: Sequence[Mapping[str, str]],
              locked: Mapping[tuple[str, str], Sequence[str]] | None = None) -> str:
    """The CycloneDX 1.6 JSON SBOM of an image (deterministic for the same inputs)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output import make_outputter
    from cyclonedx.schema import OutputFormat, SchemaVersion
    from packageurl import PackageURL
    from packaging.utils import canonicalize_name

    bom = Bom()
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    root = Component(
        name=name, version=tag or None, type=ComponentType.CONTAINER, bom_ref=image_id or image,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=image_id.removeprefix("sha256:"))] if image_id else [],
        properties=[Property(name=f"torchkiln:label:{k}", value=v) for k, v in sorted(labels.items())],
    )
    bom.metadata.component = root
    bom.metadata.properties.add(Property(name="torchkiln:version", value=__version__))
    for d in distributions:
        canon = str(canonicalize_name(d["name"]))
        hashes = [HashType(alg=HashAlgorithm.SHA_256, content=h)
                  for h in (locked or {}).get((canon, d["version"]), ())]
        props = [Property(name="torchkiln:record-sha256", value=d["record_sha256"])] if d.get("record_sha256") else []
        if canon.startswith("nvidia-") or canon in ("triton",):
            props.append(Property(name="torchkiln:cuda-library", value="true"))
        comp = Component(
            name=d["name"], version=d["version"], type=ComponentType.LIBRARY, bom_ref=f"pypi:{canon}@{d['version']}",
            purl=PackageURL(type="pypi", name=canon, version=d["version"]), hashes=hashes, properties=props,
        )
        bom.components.add(comp)
        bom.register_dependency(root, [comp])
    text = make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_6).output_as_string(indent=1)
    data = json.loads(text)
    data.pop("serialNumber", None)  # random per run: the same image gives the same SBOM
    data.get("metadata", {}).pop("timestamp", None)
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def sbom_summary(text: str) -> dict[str, Any]:
    """What ``kiln inspect`` shows of an SBOM: its components (name, version, hashes)."""
    data = json.loads(text)
    comps = []
    for c in data.get("components") or []:
        comps.append({"name": c.get("name"), "version": c.get("version"),
                      "sha256": [h.get("content") for h in c.get("hashes") or [] if h.get("alg") == "SHA-256"],
                      "cuda": any(p.get("name") == "torchkiln:cuda-library" for p in c.get("properties") or [])})
    return {"format": f"CycloneDX {data.get('specVersion', '?')}", "components": comps}


def read_sbom(image_id: str) -> tuple[Path, dict[str, Any]] | None:
    path = sbom_path(image_id)
    try:
        return path, sbom_summary(path.read_text())
    except (OSError, ValueError):
        return None


def write_sbom(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
