"""User-facing errors.

Every problem caused by the user's input (a bad file, an unknown preset, a missing
checkpoint) raises :class:`PtmError`.  The CLI prints its message as ``error: ...``
and exits with status 2, without a traceback; anything else is a bug and keeps it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PtmError(Exception):
    """An error the user can fix; the message says how."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
