"""Writing an output directory: the lock, the manifest's entries and records, ``--overwrite``
(:func:`clean`), staged outputs, and the clean-up of a failed command."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.outputs.checks import _content, _sample, check
from ptmkit.outputs.kinds import BOOKKEEPING, KINDS, LOCK, MARKER, PathLike
from ptmkit.outputs.lock import Lock, check_not_locked_above, command_line
from ptmkit.outputs.manifest import Manifest, _walk, owner

_ACTIVE: dict[Path, Session] = {}  # output directories this process is writing, by resolved path


class Session:
    """One command writing one output directory (see :func:`writing`)."""

    def __init__(self, out: Path, kind: str, created: list[Path]) -> None:
        self.out, self.kind, self.created = out, kind, created
        self.key = out.resolve()
        self.state = "new"
        self.lock = Lock(out, "the output directory")
        self.added: list[str] = []  # entries this session created (removed again if it fails)
        self.depth = 1

    def start(self, state: str) -> None:
        """Read (or start) the manifest, adopt what a killed command left, and mark it open."""
        self.state = state
        m = Manifest.read(self.out) if state == "own" else None
        if m is None:
            m = Manifest(self.kind, [], {}, {})
        m.entries = [n for n in m.entries if os.path.lexists(self.out / n)]
        files, _ = _walk(self.out, m.entries)
        if m.open is not None:  # its writer died: what appeared or changed since is that writer's
            m.files = {**{f: s for f, s in m.files.items() if f in files},
                       **{f: s for f, s in files.items() if m.foreign.get(f) != s}}
        # A recorded file that differs from its record keeps the record: --overwrite will refuse it.
        m.files = {f: s for f, s in m.files.items() if f in files}
        m.foreign = {f: s for f, s in files.items() if f not in m.files}
        m.open = {"pid": os.getpid(), "command": command_line()}
        self.manifest = m
        self.snapshot = files
        m.write(self.out)

    def declare(self, *names: str) -> None:
        """Record ``names`` as entries ptm writes here, before writing them.  A name that exists
        and is not ptm's is refused: ptm never writes over a user's file."""
        m = self.manifest
        new = [n for n in names if n not in m.entries]
        for n in new:
            if os.path.lexists(self.out / n) and owner(self.out / n) is None:  # a ptm output of its own may join
                raise PtmError(
                    f"{self.out / n} exists and was not written by ptm; move it away or choose another output "
                    f"directory (ptm never writes over a file it did not write)"
                )
        if new:
            m.entries.extend(new)
            self.added.extend(new)
            m.write(self.out)

    def seal(self) -> None:
        """Record every file ptm wrote under its entries and close the manifest."""
        m = self.manifest
        m.entries = [n for n in m.entries if os.path.lexists(self.out / n)]
        files, _ = _walk(self.out, m.entries)
        # ptm's: recorded and unchanged, or written during this command; a recorded file changed
        # by someone else keeps its record (so --overwrite refuses it); the rest is foreign
        record = {}
        for f, st in files.items():
            if m.files.get(f) == st or self.snapshot.get(f) != st:
                record[f] = st
            elif f in m.files:
                record[f] = m.files[f]
        m.files = record
        m.foreign = {f: s for f, s in files.items() if f not in m.files}
        m.open = None
        m.write(self.out)

    def undo(self) -> None:
        """Remove the entries this command created (it failed and keeps nothing)."""
        for name in self.added:
            _remove_tree(self.out / name)
        self.manifest.entries = [n for n in self.manifest.entries if n not in self.added]

    def close(self, failed: bool, keep: bool) -> None:
        try:
            if failed and not keep:
                self.undo()
            if self.out.is_dir():
                self.seal()
            if failed and not keep:
                self._remove_created()
        finally:
            self.lock.release()

    def _remove_created(self) -> None:
        """Remove the directories this command made, innermost first, each only if nothing but
        ptm's bookkeeping is left in it (a sibling run or a user's notes keep it)."""
        here = self.out.absolute()
        if self.state in ("new", "empty") and not self.manifest.entries:
            with contextlib.suppress(OSError):
                (self.out / MARKER).unlink()  # this command's marker, on an output that holds nothing
        for d in reversed(self.created):
            if d == here:
                try:
                    if self.manifest.entries or _content(d):
                        return
                except PtmError:
                    return
                for name in BOOKKEEPING:
                    with contextlib.suppress(OSError):
                        (d / name).unlink()
            try:
                d.rmdir()
            except OSError:
                return


def _remove_tree(p: Path) -> None:
    """Remove ``p`` (a file, or a directory with everything in it that this command wrote)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _enclosing(out: Path) -> Session | None:
    """The innermost output this process is writing that contains ``out``."""
    best = None
    for key, s in _ACTIVE.items():
        if key != out and key in out.parents and (best is None or best.key in key.parents):
            best = s
    return best


def _created_dirs(out: Path) -> list[Path]:
    """The directories ``mkdir -p out`` would create, outermost first."""
    missing = fileio.first_missing(out.absolute())
    if missing is None:
        return []
    chain = [out.absolute()]
    while chain[-1] != missing:
        chain.append(chain[-1].parent)
    return list(reversed(chain))


@contextlib.contextmanager
def writing(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False,
            reuse: bool = False, names: Iterable[str] | None = None,
            keep: Callable[[], bool] | None = None) -> Iterator[Session]:
    """Write a ``kind`` output in place into ``out`` (a run whose checkpoints appear one by one).

    Creates ``out``, takes its lock, checks it (:func:`check`) and declares ``names`` (default: the
    kind's) as entries ptm writes there; an output opened inside this one (a run's prepared
    corpus, a fine-tuning's seed directory) becomes one of its entries.  Nothing is removed here:
    ``--overwrite`` calls :func:`clean` once the inputs are read.  When the block fails, the
    entries it created and the directories it made are removed again, unless ``keep()`` says the
    partial output is worth keeping (a run with a checkpoint to resume from)."""
    out = Path(out)
    key = out.resolve()
    if key in _ACTIVE:  # the same directory again in this process (an inner call of the same command)
        session = _ACTIVE[key]
        session.depth += 1
        try:
            yield session
        finally:
            session.depth -= 1
        return
    first = check(out, kind, inputs, overwrite, reuse)  # before creating anything
    check_not_locked_above(key, _ACTIVE)
    parent = _enclosing(key)
    created = _created_dirs(out)
    if parent is not None:
        top = key.relative_to(parent.key).parts[0]
        parent.declare(top)
    fileio.make_dirs(out)
    try:
        session = Session(out, kind, created)
    except BaseException:
        for d in reversed(created):  # another process holds it: leave everything to that one
            try:
                d.rmdir()
            except OSError:
                break
        raise
    failed = True
    try:
        state = check(out, kind, inputs, overwrite, reuse)  # again, now that no other ptm can write here
        session.start("new" if first == "new" else state)
        session.declare(*(KINDS[kind].names if names is None else names))
        _ACTIVE[session.key] = session
        yield session
        failed = False
    finally:
        _ACTIVE.pop(session.key, None)
        kept = failed and keep is not None and _safe(keep)
        session.close(failed, kept)


def _safe(fn: Callable[[], bool]) -> bool:
    try:
        return bool(fn())
    except Exception:  # noqa: BLE001 - deciding what to keep must not hide the original error
        return True


def _plan_clean(d: Path, keep: set[str], removals: list[Path], changed: list[str]) -> None:
    m = Manifest.read(d)
    if m is None:
        return
    if d.resolve() in _ACTIVE:  # this command's own output: a killed writer's files were adopted at its start
        m.open = None
    entries = [n for n in m.entries if n not in keep and os.path.lexists(d / n)]
    files, nested = _walk(d, entries)
    for rel, st in files.items():
        if rel in m.files:
            if m.files[rel] == st or m.open is not None and m.foreign.get(rel) != st:
                removals.append(d / rel)
            else:
                changed.append(str(d / rel))
        elif m.open is not None and m.foreign.get(rel) != st:
            removals.append(d / rel)  # written by a command that was killed before recording it
    for sub in nested:
        if Manifest.read(sub) is not None:
            _plan_clean(sub, set(), removals, changed)
            removals.append(sub / MARKER)


def clean(out: PathLike, keep: Iterable[str] = ()) -> list[str]:
    """``--overwrite``: remove the files ptm wrote in ``out`` (its manifest's entries, except the
    names in ``keep``), then the directories that are left empty.  Every other file stays.  A
    file ptm wrote that has changed since stops the overwrite before anything is removed.
    Returns the entries removed or emptied."""
    out = Path(out)
    keep = set(keep)
    m = Manifest.read(out)
    if m is None:
        return []
    removals: list[Path] = []
    changed: list[str] = []
    _plan_clean(out, keep, removals, changed)
    if changed:
        raise PtmError(
            f"cannot overwrite {out}: {_sample(changed)} changed since ptm wrote "
            f"{'it' if len(changed) == 1 else 'them'}, and ptm removes only its own unchanged files; move "
            f"{'it' if len(changed) == 1 else 'them'} away (or delete {'it' if len(changed) == 1 else 'them'}) "
            f"and run the command again"
        )
    removed = [n for n in m.entries if n not in keep and os.path.lexists(out / n)]
    for p in removals:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    for name in removed:
        _prune_empty(out / name)
    session = _ACTIVE.get(out.resolve())
    if session is not None:  # forget the removed files; the entries stay declared for the new output
        session.manifest.files = {f: s for f, s in session.manifest.files.items() if (out / f).exists()}
        session.snapshot = {f: s for f, s in session.snapshot.items() if (out / f).exists()}
    return removed


def _prune_empty(p: Path) -> None:
    """Remove the empty directories under ``p`` (and ``p``), bottom up; stale lock files of
    nested outputs whose marker is gone count as empty."""
    if not p.is_dir() or p.is_symlink():
        return
    for sub in list(p.iterdir()):
        _prune_empty(sub)
    if not (p / MARKER).exists():
        with contextlib.suppress(OSError):
            (p / LOCK).unlink()
    with contextlib.suppress(OSError):
        p.rmdir()


@contextlib.contextmanager
def staged(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False) -> Iterator[Path]:
    """Check ``out``, then yield a scratch directory to write the whole output into.  When the
    block succeeds, ptm's previous output in ``out`` (with ``overwrite``) is removed and the new
    entries move into ``out``, listed in its manifest; when it fails, nothing in ``out`` has
    changed and the directories created for it are removed again (if nothing else is in them)."""
    out = Path(out)
    inputs = list(inputs)
    with writing(out, kind, inputs, overwrite=overwrite, names=()) as session:
        state = session.state

        def publish(names: list[str]) -> None:
            owned = set(session.manifest.entries)
            clash = [n for n in names if (out / n).exists() and n not in owned]
            if clash:
                raise PtmError(
                    f"{out / clash[0]} exists and was not written by ptm; move it away or choose another output "
                    f"directory (the new {KINDS[kind].label} was not saved)"
                )
            if state == "own":
                clean(out)
            session.manifest.entries = [n for n in session.manifest.entries if os.path.lexists(out / n)]
            session.declare(*names)
            session.added = []  # published: a failure after this point keeps the new output

        with fileio.staged_dir(out, publish) as tmp:
            yield tmp


__all__ = ["Session", "clean", "staged", "writing"]
