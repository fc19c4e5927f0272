"""Where ptmkit keeps fetched data and caches."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The cache root: ``$PTMKIT_HOME`` or ``~/.cache/ptmkit`` (``$XDG_CACHE_HOME`` honoured)."""
    env = os.environ.get("PTMKIT_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ptmkit"


def data_dir() -> Path:
    """Directory holding fetched data sets (one sub-directory per recipe)."""
    return home() / "data"
