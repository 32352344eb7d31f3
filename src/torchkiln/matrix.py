"""``[matrix]``: one kiln.toml, many images. Pure: axes → cells → one ``Spec`` (and plan) per cell.

The axes override one field of the spec each:

=========  ==========================  ===========================================
axis       values                      overrides
=========  ==========================  ===========================================
torch      versions or specifiers      ``[torch] version``
cuda       variants ("12.6", "cpu")    ``[torch] cuda``
python     minor versions ("3.12")     ``[python] version``
platform   "linux/amd64", "linux/arm64" ``[image] platform``
gpu        lists of GPU targets         ``[gpu] targets``
pip        lists of requirements        appended to ``[packages] pip``
=========  ==========================  ===========================================

``exclude`` and ``include`` follow GitHub Actions' documented matrix semantics: the axes' cartesian
product first (in the order the axes are written, the first axis varying slowest); then every
``exclude`` entry removes each combination it matches partially (every key it names has that
value); then the ``include`` entries, in order: an entry's keys are added to every combination
whose *original* axis values it does not overwrite (values that earlier includes added may be
overwritten); an entry that fits no combination of the axes becomes a combination of its own
(later entries are never added to such a combination: GitHub's documented example, checked in
tests/unit/test_matrix.py). Stricter than
GitHub where a typo would silently change the matrix: an exclude key must be an axis, every exclude
entry must remove something, no axis or entry may be empty, and no axis may repeat a value.

Each cell is a whole, validated ``Spec`` (without the ``[matrix]`` table), so everything downstream
(resolve, render, plan_build) is unchanged. ``resolve_matrix`` resolves every cell before anything
is built: a cell that cannot be resolved carries its ``ResolveError`` (reason and fix) instead of a
plan. ``cell_tags`` derives each cell's image tag from its *resolved* plan (documented in
docs/matrix.md) and refuses two cells with the same tag.

Our own code: the expansion is a dozen lines of set logic over TOML values, and no maintained
library implements GitHub's include rules.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchkiln.errors import KilnError, ResolveError, SpecError
from torchkiln.knowledge import Knowledge
from torchkiln.plan import BuildPlan
from torchkiln.resolve import resolve
from torchkiln.spec import AXES, Spec

#: an axis value: a string, or a list of strings (gpu, pip)
Value = str | tuple[str, ...]


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix: its axis values (axis order) and the spec they make."""

    index: int  # 1-based position in the expanded matrix
    values: tuple[tuple[str, Value], ...]
    spec: Spec

    @property
    def label(self) -> str:
        """``torch=2.13.0 python=3.11 pip=[six==1.16.0]``: how every output names the cell."""
        parts = []
        for k, v in self.values:
            parts.append(f"{k}=[{', '.join(v)}]" if isinstance(v, tuple) else f"{k}={v}")
        return " ".join(parts) or "(the spec itself)"

    def value(self, axis: str) -> Value | None:
        return dict(self.values).get(axis)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.values}


@dataclass(frozen=True)
class ResolvedCell:
    """A cell and its plan, or the reason it cannot be built (``error``, with the fix in its hint)."""

    cell: Cell
    plan: BuildPlan | None
    error: KilnError | None
    tag: str = ""  # the image tag (set for resolved cells by ``cell_tags``)
    manifest_tag: str | None = None  # the multi-platform tag this cell joins, when the platform is an axis

    @property
    def ok(self) -> bool:
        return self.plan is not None

    @property
    def image(self) -> str:
        assert self.plan is not None
        return f"{self.plan.image_name}:{self.tag}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"cell": self.cell.index, "label": self.cell.label, "values": self.cell.to_dict(),
                             "ok": self.ok}
        if self.plan is not None:
            d.update(image=self.image, manifest=(f"{self.plan.image_name}:{self.manifest_tag}"
                                                 if self.manifest_tag else None),
                     plan=self.plan.to_dict())
        if self.error is not None:
            d["error"] = self.error.to_dict()
        return d


def _freeze(v: object) -> Value:
    return tuple(v) if isinstance(v, list | tuple) else str(v)


def combinations(axes: Sequence[tuple[str, Sequence[Value]]], exclude: Sequence[Mapping[str, Value]],
                 include: Sequence[Mapping[str, Value]]) -> list[dict[str, Value]]:
    """GitHub Actions' expansion (see the module docstring), on plain values; pure."""
    names = [name for name, _ in axes]
    combos = [dict(zip(names, values, strict=True)) for values in itertools.product(*(vals for _, vals in axes))]
    if not axes:
        combos = []
    for entry in exclude:
        combos = [c for c in combos if not all(c.get(k) == v for k, v in entry.items())]
    original = [dict(c) for c in combos]  # what includes may not overwrite
    extra: list[dict[str, Value]] = []
    for entry in include:
        fitted = False
        for c, orig in zip(combos, original, strict=True):
            if all(orig[k] == v for k, v in entry.items() if k in orig):
                c.update(entry)
                fitted = True
        if not fitted:
            extra.append(dict(entry))
    combos += extra
    return combos


def expand(spec: Spec, origin: str = "kiln.toml") -> tuple[Cell, ...]:
    """The cells of ``spec``'s matrix (one cell, the spec itself, when it has none)."""
    m = spec.matrix
    if m is None:
        return (Cell(1, (), spec),)
    axes = [(a, [_freeze(v) for v in getattr(m, a)]) for a in m.axis_order if getattr(m, a)]
    entries = {kind: [{k: _freeze(v) for k, v in e.model_dump(exclude_none=True).items()} for e in getattr(m, kind)]
               for kind in ("exclude", "include")}
    axis_names = [a for a, _ in axes]
    for i, entry in enumerate(entries["exclude"], 1):
        stray = [k for k in entry if k not in axis_names]
        if stray:
            raise SpecError(
                f"{origin}: [matrix] exclude[{i}] names {', '.join(map(repr, stray))}, which is not an axis of the "
                f"matrix ({', '.join(axis_names) or 'none'}).",
                hint="An exclude entry removes combinations of the axes: name only keys that list values in "
                     "[matrix]; use include to add a combination.")
        left = combinations(axes, [entry], [])
        if len(left) == len(combinations(axes, [], [])):
            shown = ", ".join(f"{k} = {_show(v)}" for k, v in entry.items())
            raise SpecError(
                f"{origin}: [matrix] exclude[{i}] ({shown}) matches no combination of the axes.",
                hint="Check the values against the axes (a typo excludes nothing); remove the entry if it is "
                     "no longer needed.")
    combos = combinations(axes, entries["exclude"], entries["include"])
    if not combos:
        raise SpecError(f"{origin}: [matrix] leaves no combination to build (every one is excluded).",
                        hint="Remove an exclude entry, or add a combination with include.")
    order = {a: i for i, a in enumerate(AXES)}
    cells = []
    for n, combo in enumerate(combos, 1):
        values = tuple(sorted(combo.items(), key=lambda kv: order[kv[0]]))
        cells.append(Cell(n, values, _apply(spec, values, origin, n)))
    return tuple(cells)


def _show(v: Value) -> str:
    return "[" + ", ".join(f'"{x}"' for x in v) + "]" if isinstance(v, tuple) else f'"{v}"'


def _apply(spec: Spec, values: Sequence[tuple[str, Value]], origin: str, n: int) -> Spec:
    """The spec with one cell's values, validated again (the axis values were checked one by one)."""
    data = spec.model_dump(by_alias=True, exclude_unset=True)
    data.pop("matrix", None)

    def put(table: str, key: str, value: object) -> None:
        data[table] = {**data.get(table, {}), key: value}

    for axis, value in values:
        if axis == "torch":
            put("torch", "version", value)
        elif axis == "cuda":
            put("torch", "cuda", value)
        elif axis == "python":
            put("python", "version", value)
        elif axis == "platform":
            put("image", "platform", value)
        elif axis == "gpu":
            put("gpu", "targets", list(value))
        elif axis == "pip":
            put("packages", "pip", [*data.get("packages", {}).get("pip", []), *value])
    from torchkiln.spec import parse_spec

    label = " ".join(f"{k}={_show(v)}" for k, v in values)
    return parse_spec(data, origin=f"{origin} [matrix] cell {n} ({label})")


def resolve_matrix(cells: Sequence[Cell], kb: Knowledge) -> tuple[ResolvedCell, ...]:
    """Resolve every cell; an impossible cell keeps its error (the reason and, in its hint, the fix)."""
    out = []
    for cell in cells:
        try:
            out.append(ResolvedCell(cell, resolve(cell.spec, kb), None))
        except (ResolveError, SpecError) as e:
            out.append(ResolvedCell(cell, None, e))
    return tuple(out)


_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def _tag_part(text: str) -> str:
    return _TAG_CHARS.sub("", text.replace("==", "").replace(" ", ""))


def _list_part(prefix: str, items: Sequence[str]) -> str:
    part = "-".join(_tag_part(x).lower() for x in items) or "none"
    if len(part) > 40:  # long lists: a readable head and a digest of the whole
        part = part[:31] + "-" + hashlib.sha256("\n".join(items).encode()).hexdigest()[:8]
    return f"{prefix}{part}"


def tag_parts(cell: Cell, plan: BuildPlan, axes: Sequence[str]) -> tuple[list[str], str | None]:
    """(the parts of a cell's tag, its platform part): see docs/matrix.md, "Tags"."""
    parts = [f"torch{plan.torch.version}", plan.torch.variant, f"py{plan.python}"]
    if "gpu" in axes:
        parts.append(_list_part("", [t.name for t in plan.targets]))
    pip = cell.value("pip")
    if "pip" in axes and isinstance(pip, tuple):
        parts.append(_list_part("pip-", pip) if pip else "pip-none")
    arch = plan.platform.split("/", 1)[1] if "platform" in axes else None
    return parts, arch


def cell_tags(spec: Spec, resolved: Sequence[ResolvedCell], origin: str = "kiln.toml") -> tuple[ResolvedCell, ...]:
    """Each resolved cell with its image tag and (platform axis) manifest tag; duplicates are a SpecError."""
    axes = [k for c in resolved for k, _ in c.cell.values]
    prefix = "" if spec.image.tag == "latest" else f"{spec.image.tag}-"
    out: list[ResolvedCell] = []
    seen: dict[str, ResolvedCell] = {}
    for rc in resolved:
        if rc.plan is None:
            out.append(rc)
            continue
        parts, arch = tag_parts(rc.cell, rc.plan, axes)
        base = prefix + "-".join(parts)
        tag = base + (f"-{arch}" if arch else "")
        tag = tag if len(tag) <= 128 else tag[:119] + "-" + hashlib.sha256(tag.encode()).hexdigest()[:8]
        ref = f"{rc.plan.image_name}:{tag}"
        if ref in seen:
            other = seen[ref]
            raise SpecError(
                f"{origin}: [matrix] cells {other.cell.index} ({other.cell.label}) and {rc.cell.index} "
                f"({rc.cell.label}) would both be {ref}: they resolve to the same image.",
                hint="Remove one of them (an exclude entry, or fewer axis values), or make them differ in "
                     "torch, CUDA variant, Python, GPU targets, pip packages or platform.")
        new = ResolvedCell(rc.cell, rc.plan, None, tag, base if arch else None)
        seen[ref] = new
        out.append(new)
    return tuple(out)


def manifest_groups(resolved: Sequence[ResolvedCell]) -> dict[str, tuple[ResolvedCell, ...]]:
    """Multi-platform references → the cells (one per platform) that differ only by platform."""
    groups: dict[str, list[ResolvedCell]] = {}
    for rc in resolved:
        if rc.plan is not None and rc.manifest_tag:
            groups.setdefault(f"{rc.plan.image_name}:{rc.manifest_tag}", []).append(rc)
    return {ref: tuple(cells) for ref, cells in groups.items()}


def torch_layer_key(plan: BuildPlan) -> tuple[object, ...]:
    """What the torch layer of a plan's image depends on: cells with the same key share that layer.

    The base stage (base image, platform, apt packages, Python) and the torch stage (torch, its
    companions and build, the bytecode set); the pip packages, extensions and app come after it.
    """
    t = plan.torch
    return (plan.base_image, plan.platform, plan.python, plan.python_source, plan.apt_packages, t.requirement,
            t.companions, t.build, plan.bytecode, plan.precompile, plan.sources)


def impossible_summary(resolved: Sequence[ResolvedCell]) -> str:
    """One paragraph per impossible cell: its values, the reason and the fix."""
    lines = []
    for rc in resolved:
        if rc.error is not None:
            lines.append(f"cell {rc.cell.index} ({rc.cell.label}): {rc.error.message}\n  fix: {rc.error.hint}")
    return "\n".join(lines)
