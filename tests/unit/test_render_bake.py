"""`kiln render --format bake`: the matrix as a docker buildx bake file, checked against bake's schema.

The schema below is bake's documented one (the JSON keys of buildx's ``bake.Target`` and ``Group``
and the reference at docs.docker.com/build/bake/reference/): the top-level blocks, the attributes
a target takes with their JSON types, and the names bake accepts. The golden file pins the text.
Regenerate it after an intended change with KILN_UPDATE_GOLDENS=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from torchkiln.building.context import MANIFEST, bake_context
from torchkiln.errors import ExitCode
from torchkiln.load import load_matrix
from torchkiln.render.bake import BAKE_FILE, render_bake

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "tests" / "fixtures" / "matrix" / "kiln.toml"
GOLDEN = ROOT / "tests" / "golden" / "bake" / "matrix.json"

STR, LIST, MAP, BOOL = "string", "list of strings", "map of strings", "bool"
#: bake's target attributes and their JSON types (buildx bake.Target)
TARGET_SCHEMA = {
    "description": STR, "inherits": LIST, "annotations": LIST, "attest": LIST, "context": STR,
    "contexts": MAP, "dockerfile": STR, "dockerfile-inline": STR, "args": MAP, "labels": MAP, "tags": LIST,
    "cache-from": LIST, "cache-to": LIST, "target": STR, "secret": LIST, "ssh": LIST, "platforms": LIST,
    "output": LIST, "pull": BOOL, "no-cache": BOOL, "network": STR, "no-cache-filter": LIST, "shm-size": STR,
    "ulimits": LIST, "call": STR, "entitlements": LIST,
}
GROUP_SCHEMA = {"description": STR, "targets": LIST}
TOP_LEVEL = {"group", "target", "variable", "function"}
NAME = re.compile(r"^[a-zA-Z0-9_-]+$")  # bake's validateTargetName
PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")


def _typed(value: Any, kind: str) -> bool:
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == LIST:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def bake_problems(doc: Any, folder: Path | None = None) -> list[str]:
    """Everything in ``doc`` that bake's documented schema does not allow (empty when valid)."""
    if not isinstance(doc, dict):
        return ["the file is not a JSON object"]
    problems = [f"unknown top-level block {k!r}" for k in doc if k not in TOP_LEVEL]
    targets = doc.get("target", {})
    for block, schema in (("target", TARGET_SCHEMA), ("group", GROUP_SCHEMA)):
        for name, body in doc.get(block, {}).items():
            if not NAME.match(name):
                problems.append(f"{block} name {name!r} is not [a-zA-Z0-9_-]+")
            for key, value in body.items():
                if key not in schema:
                    problems.append(f"{block} {name}: unknown attribute {key!r}")
                elif not _typed(value, schema[key]):
                    problems.append(f"{block} {name}: {key} must be a {schema[key]}")
    for name, group in doc.get("group", {}).items():
        problems += [f"group {name} names no target {t!r}" for t in group.get("targets", [])
                     if t not in targets and t not in doc.get("group", {})]
    for name, body in targets.items():
        problems += [f"target {name}: platform {p!r}" for p in body.get("platforms", []) if not PLATFORM.match(p)]
        if folder is not None:
            dockerfile = folder / body.get("context", ".") / body.get("dockerfile", "Dockerfile")
            if not dockerfile.is_file():
                problems.append(f"target {name}: no {dockerfile}")
            elif f" AS {body.get('target')}\n" not in dockerfile.read_text():
                problems.append(f"target {name}: its Dockerfile has no stage {body.get('target')!r}")
    return problems


def test_the_checker_catches_what_bake_would_refuse() -> None:
    bad = {"target": {"a.b": {"tag": ["x"], "platforms": "linux/amd64", "no-cache": "yes"}},
           "group": {"default": {"targets": ["nope"]}}, "targets": {}}
    problems = bake_problems(bad)
    for needle in ("unknown top-level block 'targets'", "'a.b' is not", "unknown attribute 'tag'",
                   "platforms must be a list", "no-cache must be a bool", "names no target 'nope'"):
        assert any(needle in p for p in problems), (needle, problems)


def test_bake_file_matches_golden_and_bakes_schema() -> None:
    _spec, cells, _ = load_matrix(SPEC)
    text = render_bake(cells)
    assert text == render_bake(cells)  # deterministic
    if os.environ.get("KILN_UPDATE_GOLDENS") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    doc = json.loads(text)
    assert bake_problems(doc) == []
    assert len(doc["target"]) == 6 and doc["group"]["default"]["targets"] == list(doc["target"])
    first = doc["target"]["cell1-2026_11-torch2_13_0-cpu-py3_11-amd64"]
    assert first["tags"] == ["registry.example:5000/acme/trainer:2026.11-torch2.13.0-cpu-py3.11-amd64"]
    assert first["platforms"] == ["linux/amd64"] and first["target"] == "runtime"


def test_render_bake_writes_a_context_per_cell(tmp_path: Path, capsys: Any) -> None:
    from torchkiln.cli import main

    out = tmp_path / "bake"
    assert main(["render", str(SPEC), "--format", "bake", "-o", str(out), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["targets"] == 6 and Path(listed["bake_file"]) == out / BAKE_FILE
    assert bake_problems(json.loads((out / BAKE_FILE).read_text()), out) == []
    _spec, cells, spec_dir = load_matrix(SPEC)
    assert sorted(bake_context(cells, spec_dir).texts) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*")
        if p.is_file() and ".kiln/bin" not in str(p) and str(p.relative_to(out)) != MANIFEST)


def test_render_bake_refuses_impossible_cells_unless_skipped(tmp_path: Path, capsys: Any) -> None:
    from torchkiln.cli import main

    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "a"\n[torch]\nversion = "2.13.0"\ncuda = "cpu"\n'
                    '[matrix]\npython = ["3.11", "3.7"]\n')
    assert main(["render", str(spec), "--format", "bake", "--stdout"]) == ExitCode.RESOLVE
    assert "cell 2 (python=3.7)" in capsys.readouterr().err
    assert main(["render", str(spec), "--format", "bake", "--stdout", "--skip-impossible"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["target"]) == ["cell1-torch2_13_0-cpu-py3_11"] and bake_problems(doc) == []
