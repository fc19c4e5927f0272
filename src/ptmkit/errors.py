"""User-facing errors.

Every problem caused by the user's input (a bad file, an unknown preset, a missing
checkpoint) raises :class:`PtmError`.  The CLI prints its message as ``error: ...``
and exits with status 2, without a traceback; anything else is a bug and keeps it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path


class PtmError(Exception):
    """An error the user can fix; the message says how."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def require_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` as a ``Path`` if it is an existing file; otherwise a :class:`PtmError` that says
    whether it is missing or a directory (a common slip: a folder given where a file is expected)."""
    p = Path(path)
    if p.is_dir():
        raise PtmError(f"{what} {p} is a directory; give the path of a file")
    if not p.is_file():
        raise PtmError(f"{what} not found: {p}")
    return p
