"""The facts of an image that brings its own torch (``[torch] source = "image"``): the model the
resolver reads, and the knowledge base's view of an NGC image. Pure: no image is read here
(``torchkiln.images.facts`` reads them from an image's files).

The knowledge base's NGC rows are a fallback (:func:`facts_from_ngc_row`, when the image is not
available to read) and a cross-check (:func:`cross_check`), never the source of truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from torchkiln.arch import ArchEntry

if TYPE_CHECKING:
    from torchkiln.knowledge import Knowledge, NgcRelease


@dataclass(frozen=True)
class ImageFacts:
    """The facts of a torch-bearing image. ``origin`` says where they came from."""

    image: str
    #: "image" (read from the image's files) or "knowledge" (a knowledge-base row: the image was not read)
    origin: str
    torch_version: str
    #: torch.version.cuda ("13.1"), None for a CPU build
    torch_cuda: str | None
    torch_git: str
    python: str  # "3.12"
    python_exe: str  # "/usr/bin/python3.12"
    site: str  # "/usr/local/lib/python3.12/dist-packages"
    #: the constraints file the image ships ("/etc/pip/constraint.txt"), "" when none
    constraints_path: str
    #: its pin of torch ("torch==2.10.0a0+b4e4ee81d3"), "" when it pins none
    constraints_torch: str
    constraints_count: int
    #: SASS and PTX entries of libtorch_cuda.so ("sm_80", "compute_120"), sorted; () for CPU builds
    arch_entries: tuple[str, ...]
    arch_source: str  # the library they were read from, or the knowledge row
    #: the CUDA toolkit (nvcc) of the image: its major.minor, "" when the image has no nvcc
    nvcc_cuda: str
    cuda_home: str
    image_id: str = ""
    platform: str = ""
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    #: how the image was read: "direct" (the engine's layer folders in place), "export" (its save on a
    #: pipe), "archive" (a saved file); read_note says why not in place
    read: str = ""
    read_note: str = ""
    #: what reading cost: bytes read, the image's size, seconds
    bytes_read: int = 0
    image_size: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def ngc_release(self) -> str:
        """NGC's release ("25.12") from the image's own environment, "" for other images."""
        return dict(self.env).get("NVIDIA_PYTORCH_VERSION", "")

    @property
    def entries(self) -> tuple[ArchEntry, ...]:
        return tuple(ArchEntry.parse(a) for a in self.arch_entries)

    @property
    def arch_list(self) -> str:
        """The entries as a TORCH_CUDA_ARCH_LIST ("8.0;9.0;12.0+PTX"; PTX-only archs also get "+PTX")."""
        return arch_list_of(self.entries)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["env"] = dict(self.env)
        d["labels"] = dict(self.labels)
        d["arch_list"] = self.arch_list
        d["ngc_release"] = self.ngc_release
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ImageFacts:
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in d.items() if k in known}
        data["env"] = tuple(sorted(dict(d.get("env", {})).items()))
        data["labels"] = tuple(sorted(dict(d.get("labels", {})).items()))
        data["arch_entries"] = tuple(d.get("arch_entries", ()))
        data["notes"] = tuple(d.get("notes", ()))
        return cls(**data)


def arch_list_of(entries: Iterable[ArchEntry]) -> str:
    """A TORCH_CUDA_ARCH_LIST of the plain SASS and PTX entries ("8.0;9.0;12.0+PTX").

    Arch-specific and family cubins alone (sm_90a, sm_103f: kernels for one device or family, as
    torch's wheels carry for a few libraries) have no spelling there: they stay in ``arch_entries``.
    """
    sass = {e.capability for e in entries if e.kind == "sass" and not e.suffix}
    ptx = {e.capability for e in entries if e.kind == "ptx" and not e.suffix}
    return ";".join(f"{c}+PTX" if c in ptx else str(c) for c in sorted(sass | ptx))


def mm(version: str) -> str:
    """The major.minor of a version ("13.1.0" → "13.1"), "" when it has none."""
    m = re.match(r"(\d+\.\d+)", version or "")
    return m.group(1) if m else ""


def facts_from_ngc_row(image: str, row: NgcRelease, kb: Knowledge) -> ImageFacts:
    """The facts of an NGC PyTorch image as the knowledge base records them (the image was not read)."""
    cuda = mm(row.cuda)
    entries = tuple(e.name for e in _entries_of(row.arch_list))
    return ImageFacts(
        image=image, origin="knowledge", torch_version=row.torch, torch_cuda=cuda, torch_git="",
        python=row.python, python_exe=f"/usr/bin/python{row.python}",
        site=f"/usr/local/lib/python{row.python}/dist-packages",
        constraints_path="/etc/pip/constraint.txt" if row.constraints else "",
        constraints_torch=f"torch=={row.torch}" if row.constraints else "", constraints_count=0,
        arch_entries=entries, arch_source=f"knowledge/ngc.toml row {row.ngc} ({row.source})" if entries else "",
        nvcc_cuda=cuda, cuda_home="/usr/local/cuda", env=(("NVIDIA_PYTORCH_VERSION", row.ngc),),
        platform="linux/amd64",
    )


def _entries_of(arch_list: str) -> tuple[ArchEntry, ...]:
    from torchkiln.arch import parse_arch_list

    return tuple(sorted(set(parse_arch_list(arch_list)), key=lambda e: (e.capability, e.kind)))


def cross_check(facts: ImageFacts, row: NgcRelease | None) -> list[str]:
    """Where the image and the knowledge base's row of its NGC release disagree (the image wins)."""
    if row is None or facts.origin != "image":
        return []
    out = []
    if row.torch != facts.torch_version:
        out.append(f"torch {facts.torch_version} (the row says {row.torch})")
    if facts.torch_cuda and mm(row.cuda) != facts.torch_cuda:
        out.append(f"torch's CUDA {facts.torch_cuda} (the row says {mm(row.cuda)})")
    if row.python != facts.python:
        out.append(f"Python {facts.python} (the row says {row.python})")
    if row.arch_list and facts.arch_entries and set(_entries_of(row.arch_list)) != set(facts.entries):
        out.append(f"archs {facts.arch_list} (the row says {row.arch_list})")
    if row.constraints != bool(facts.constraints_path):
        out.append("a constraints file" if facts.constraints_path else "no constraints file"
                   + f" (the row says {'one' if row.constraints else 'none'})")
    return out


def ngc_row_for(image: str, facts: ImageFacts | None, kb: Knowledge) -> NgcRelease | None:
    """The knowledge base's row of an NGC PyTorch image: by its NVIDIA_PYTORCH_VERSION, else by its tag."""
    release = facts.ngc_release if facts is not None else ""
    if not release:
        m = re.search(r"(?:^|/)nvidia/pytorch:(\d\d\.\d\d)-py3", image)
        release = m.group(1) if m else ""
    return next((r for r in kb.ngc if r.ngc == release), None) if release else None
