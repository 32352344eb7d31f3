"""The knowledge rows still agree with what scripts/check_knowledge.py measured on PyPI's wheels.

The measurements are committed (scripts/results/check_knowledge_cache.json); this re-compares them with
the current rows offline, so that an edited row that contradicts a measured wheel fails here.
"""

import importlib.util
import json
import re
import sys
from pathlib import Path

from torchkiln.knowledge import load_knowledge

ROOT = Path(__file__).parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("check_knowledge", ROOT / "scripts" / "check_knowledge.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_knowledge"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_rows_agree_with_the_measured_wheels() -> None:
    ck = _script()
    kb = load_knowledge()
    cache = json.loads((ROOT / "scripts" / "results" / "check_knowledge_cache.json").read_text())
    assert len(cache) == 33  # 30 of 2026-11-24, 2.15.0 x2, the 2.10.0-3 rebuild
    for record in cache.values():
        m = ck.Measured(**record)
        name = ck.WHEEL.match(m.filename)
        assert name is not None
        assert ck.compare(kb, name.group("version"), name.group("machine"), m, None) == [], m.filename
    aarch64 = [ck.Measured(**r) for k, r in cache.items() if "aarch64" in k]
    assert {m.cuda for m in aarch64 if re.match(r"torch-2\.1[1-4]", m.filename)} == {"13.0"}
    assert all(m.machine == "aarch64" for m in aarch64 if m.cuda)  # our fat-binary reader on Arm ELF files
