"""Tests marked ``network`` read the public package index: they run only when asked for.

Asked for = ``pytest -m network`` (a marker expression that selects ``network``) or
``KILN_NETWORK_TESTS=1``; otherwise they are deselected (not skipped: the README's test command
reports no skip but GPU and apptainer ones), so CI and the usual runs stay offline. When asked for
but PyPI cannot be reached, they are skipped with that reason.
"""

from __future__ import annotations

import os
import urllib.request

import pytest

PYPI = "https://pypi.org/simple/"


def _asked(config: pytest.Config) -> bool:
    expr = config.getoption("-m") or ""
    return os.environ.get("KILN_NETWORK_TESTS") == "1" or ("network" in expr and "not network" not in expr)


def _reachable() -> str | None:
    try:
        urllib.request.urlopen(urllib.request.Request(PYPI + "torch/", method="HEAD"), timeout=15).close()
    except OSError as e:
        return f"PyPI is not reachable ({e})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [i for i in items if i.get_closest_marker("network") is not None]
    if not marked:
        return
    if not _asked(config):
        items[:] = [i for i in items if i.get_closest_marker("network") is None]
        config.hook.pytest_deselected(items=marked)
        return
    reason = _reachable()
    if reason:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))
