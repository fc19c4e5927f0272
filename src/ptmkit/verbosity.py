"""How much the ``ptm`` command says: ``--quiet`` (warnings and errors only, no progress displays)
or ``--verbose`` (debug logging), the same for every sub-command.  The CLI sets it once; the
progress displays (:mod:`ptmkit.train.progress`) and the commands read it.  No imports, so the
CLI sets it without loading anything."""

from __future__ import annotations

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``ptm --quiet``: every progress display of this process stays silent."""
    global _quiet
    _quiet = bool(quiet)


def quiet() -> bool:
    return _quiet
