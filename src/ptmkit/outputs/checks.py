"""May a command write its output here?  New, empty, or ptm's own output of the same kind."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.outputs.kinds import BOOKKEEPING, KINDS, MARKER, Kind, PathLike
from ptmkit.outputs.manifest import owner


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_inputs(out: PathLike, inputs: Iterable[PathLike | None]) -> None:
    """Refuse an input that lies inside ``out`` (or is ``out``): whatever ptm writes or removes
    there could destroy it.  Missing inputs are left to the command's own message."""
    out = Path(out)
    roots = {Path(os.path.abspath(out)), out.resolve()}
    for inp in inputs:
        if inp is None or str(inp) == "":
            continue
        p = Path(inp)
        if not p.exists():
            continue
        # Both the path as given (a link inside ``out``) and the file it names.
        for candidate in {Path(os.path.abspath(p)), p.resolve()}:
            if any(_inside(candidate, root) for root in roots):
                raise PtmError(
                    f"the input {inp} lies inside the output directory {out}; ptm never writes where its "
                    f"inputs are: choose an output directory outside your inputs"
                )


def _a(label: str) -> str:
    """``label`` with its indefinite article ("an HF transformers export", "a prepared corpus")."""
    return ("an " if label[0] in "aeiou" or label.startswith("HF") else "a ") + label


def _sample(names: list[str], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def _content(d: Path) -> list[str]:
    """Names in ``d`` other than ptm's bookkeeping (marker, lock, leftover scratch directories)."""
    try:
        names = os.listdir(d)
    except OSError as exc:
        raise PtmError(f"cannot read the output directory {d}: {exc.strerror}; choose another directory") from exc
    return sorted(n for n in names if n not in BOOKKEEPING and not n.startswith(fileio.STAGING_PREFIX))


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    return KINDS[kind]


def check(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False,
          reuse: bool = False) -> str:
    """Raise :class:`PtmError` unless a ``kind`` output may be written into ``out``.

    Returns ``"new"`` (``out`` does not exist), ``"empty"`` or ``"own"`` (it holds ptm's output of
    this kind, by its marker; allowed only with ``overwrite``, or ``reuse`` for a command that
    continues it, as ``--resume`` does).  Reads only: :func:`writing` checks again under the lock.
    """
    spec = _kind(kind)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PtmError(f"{out} exists and is not a directory; give a directory for {_a(spec.label)}")
    check_inputs(out, inputs)
    if not out.exists():
        return "new"
    content = _content(out)
    found = owner(out)
    if not content and found is None:
        return "empty"
    if found is None:
        raise PtmError(
            f"{out} is not empty ({_sample(content)}) and was not written by ptm (it has no {MARKER}); ptm writes "
            f"only into a new or empty directory or its own {spec.label}: choose a new output directory"
        )
    if found != kind:
        other = KINDS[found]
        raise PtmError(
            f"{out} holds {_a(other.label)} (written by `{other.command}`), not {_a(spec.label)}; "
            f"choose another output directory"
        )
    if not content:
        return "empty"
    if not (overwrite or reuse):
        if spec.overwrite:
            raise PtmError(
                f"{out} already holds {_a(spec.label)}; pass --overwrite to replace it (ptm removes only the "
                f"files it wrote there), or choose another output directory"
            )
        raise PtmError(f"{out} already holds {_a(spec.label)}; choose a new output directory (nothing is overwritten)")
    return "own"


__all__ = ["check", "check_inputs"]
