"""User-facing errors.

Every problem caused by the user's input (a bad file, an unknown preset, a missing
checkpoint) raises :class:`PtmError`.  The CLI prints its message as ``error: ...``
and exits with status 2, without a traceback; anything else is a bug and keeps it.
"""

from __future__ import annotations

import difflib
import errno
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


# Errors caused by the place being written, not by ptmkit: reported without a traceback.
USER_ERRNOS = {
    errno.ENOSPC: "the disk is full; free some space or write somewhere else",
    errno.EDQUOT: "the disk quota is exhausted; free some space or write somewhere else",
    errno.EFBIG: "the file is larger than this file system allows; write somewhere else",
    errno.EACCES: "permission denied; choose a directory you can write to",
    errno.EPERM: "operation not permitted; choose a directory you can write to",
    errno.EROFS: "the file system is read-only; choose a writable directory",
    errno.ENOTDIR: "a component of the path is a file, not a directory; choose another path",
    errno.ENOENT: "its parent directory cannot be created there; choose another path",
}


def os_error_message(exc: OSError) -> str | None:
    """``"PATH: reason; what to do"`` for an ``OSError`` the user can fix (full disk, no permission,
    ...), ``None`` for others.  The CLI's last resort for such errors outside :func:`ptmkit.fileio.write_error`."""
    advice = USER_ERRNOS.get(exc.errno or 0)
    if advice is None:
        return None
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or type(exc).__name__}; {advice}"
