"""torchkiln's own cache folder (build contexts, debootstrap's package downloads)."""

from __future__ import annotations

import os
from pathlib import Path


def kiln_cache_dir() -> Path:
    """torchkiln's cache folder: ``$KILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchkiln`` (``~/.cache``)."""
    explicit = os.environ.get("KILN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "torchkiln"
