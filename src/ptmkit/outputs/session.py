"""Writing an output directory: the lock, the manifest's entries and records, ``--overwrite``
(:func:`clean`), staged outputs, and the clean-up of a failed command."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.outputs.checks import _content, _sample, check
from ptmkit.outputs.kinds import BOOKKEEPING, JOURNAL, KINDS, LOCK, MARKER, PathLike, Stat
from ptmkit.outputs.lock import Lock, check_not_locked_above, command_line
from ptmkit.outputs.manifest import Manifest, _stat, _walk, contained, owner

_ACTIVE: dict[Path, Session] = {}  # output directories this process is writing, by resolved path


class Session:
    """One command writing one output directory (see :func:`writing`).

    What the command writes is recorded when it is written: every finished write of
    :mod:`ptmkit.fileio` (and every writer that calls :func:`ptmkit.fileio.record`) inside this
    output lands in ``written`` and as a line in the journal (``.ptmkit-journal``), so that the
    next command knows what a killed one wrote.  At the end (:meth:`seal`) the manifest lists
    exactly the recorded files; anything else found under ptm's entries stays the user's."""

    def __init__(self, out: Path, kind: str, created: list[Path]) -> None:
        self.out, self.kind, self.created = out, kind, created
        self.key = out.resolve()
        self.state = "new"
        self.lock = Lock(out, "the output directory")
        self.added: list[str] = []  # entries this session created (removed again if it fails)
        self.written: dict[str, Stat] = {}  # files this command wrote: relative path -> stat when written
        self.temporaries: set[str] = set()  # temporary files and directories it made
        self.depth = 1
        self.before: tuple | None = None  # the manifest as found (content, bytes), restored if unchanged
        self.journal = None

    def start(self, state: str) -> None:
        """Read (or start) the manifest, adopt what a killed command's journal records, open a
        new journal and mark the manifest open."""
        self.state = state
        m = Manifest.read(self.out) if state == "own" else None
        if m is not None and m.open is None:
            self.before = (m.content(), (self.out / MARKER).read_bytes())
        if m is None:
            m = Manifest(self.kind, [], {}, {})
        if m.open is not None:  # its writer died: what its journal records is ptm's, its temporaries are debris
            for rel in m.adopt(self.out):
                if contained(self.out, rel):
                    _remove_tree(self.out / rel)
        # An entry stays ptm's name until ptm removes it: a record the user deleted and restored
        # (as an error message asked) is still ptm's to read and write again.
        files, _ = _walk(self.out, m.entries)
        # A recorded file that differs from its record keeps the record: --overwrite will refuse it.
        m.files = {f: s for f, s in m.files.items() if f in files}
        m.foreign = {f: s for f, s in files.items() if f not in m.files}
        m.open = {"pid": os.getpid(), "command": command_line()}
        self.manifest = m
        try:
            self.journal = open(self.out / JOURNAL, "w", encoding="utf-8")  # noqa: SIM115 - open for the session
        except OSError as exc:
            raise (fileio.write_error(exc, self.out / JOURNAL) or exc) from exc
        m.write(self.out)

    def note(self, path: Path, temporary: bool) -> None:
        """Record a finished write of ``path`` (inside this output), or a temporary made there."""
        rel = path.relative_to(self.key).as_posix()
        if rel.split("/")[-1] in BOOKKEEPING:
            return
        lines = []
        if temporary:
            self.temporaries.add(rel)
            lines.append({"t": rel})
        elif path.is_dir() and not path.is_symlink():
            files, _ = _walk(self.key, [rel])
            self.written.update(files)
            lines += [{"f": f, "s": list(st)} for f, st in files.items()]
        elif os.path.lexists(path):
            self.written[rel] = st = _stat(path)
            lines.append({"f": rel, "s": list(st)})
        if lines and self.journal is not None:
            self.journal.write("".join(json.dumps(line) + "\n" for line in lines))
            self.journal.flush()  # in the kernel's hands: a kill -9 cannot lose it

    def declare(self, *names: str) -> None:
        """Record ``names`` as entries ptm writes here, before writing them.  A name that exists
        and is not ptm's is refused: ptm never writes over a user's file."""
        m = self.manifest
        new = [fileio.path_part(n, "entry") for n in names if n not in m.entries]
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
        """Record every file ptm wrote under its entries and close the manifest.  A file is ptm's
        only if it was recorded when written (now or by an earlier command); a recorded file
        changed since keeps its record (so --overwrite refuses it); the rest is foreign."""
        m = self.manifest
        # names declared by this command but never written are not kept; earlier ones stay ptm's
        m.entries = [n for n in m.entries if n not in self.added or os.path.lexists(self.out / n)]
        files, _ = _walk(self.out, m.entries)
        record = {}
        for f in files:
            if f in self.written:
                record[f] = self.written[f]
            elif f in m.files:
                record[f] = m.files[f]
        m.files = record
        m.foreign = {f: s for f, s in files.items() if f not in m.files}
        m.open = None
        if self.before is not None and m.content() == self.before[0]:
            fileio.atomic_write_bytes(self.out / MARKER, self.before[1], durable=False)  # as it was found
        else:
            m.write(self.out)
        self._close_journal(remove=True)

    def _close_journal(self, remove: bool) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
            if remove:
                with contextlib.suppress(OSError):
                    (self.out / JOURNAL).unlink()

    def undo(self) -> None:
        """Remove what this command wrote under the entries it created (it failed and keeps
        nothing); a file it did not write (a user's, saved there meanwhile) stays, and so does
        its directory."""
        removals: list[Path] = []
        for name in self.added:
            own = {f for f in {*self.written, *self.manifest.files} if f.split("/")[0] == name}
            files, nested = _walk(self.out, [name])
            removals += [self.out / f for f in files if f in own and contained(self.out, f)]
            for sub in nested:
                _plan_clean(sub, set(), removals, [])
                removals += [sub / n for n in BOOKKEEPING]
        for rel in self.temporaries:
            if contained(self.out, rel):
                _remove_tree(self.out / rel)
        for p in removals:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                p.unlink()
        for name in self.added:
            _prune_empty(self.out / name)
        self.manifest.entries = [n for n in self.manifest.entries
                                 if n not in self.added or os.path.lexists(self.out / n)]

    def close(self, failed: bool, keep: bool) -> None:
        try:
            if failed and not keep:
                self.undo()
            if self.out.is_dir():
                self.seal()
            if failed and not keep:
                self._remove_created()
        finally:
            self._close_journal(remove=False)
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


def _session_of(path: Path) -> Session | None:
    """The innermost output this process is writing that holds ``path``."""
    best = None
    for key, s in _ACTIVE.items():
        if key in path.parents and (best is None or best.key in key.parents):
            best = s
    return best


def discard(path: PathLike) -> None:
    """Remove ``path``, a file or directory ptm wrote inside an output this process writes (an
    old checkpoint, a finished run's resume state, a temporary): only the files recorded as
    ptm's go, so a file a user saved in there stays, and so do the directories holding one.
    Outside every output this process writes there is no record to consult: ``path`` goes whole."""
    p = Path(path)
    try:
        where = Path(os.path.realpath(p.parent)) / p.name
    except OSError:
        return
    session = _session_of(where)
    if session is None:
        _remove_tree(p)
        return
    rel = where.relative_to(session.key).as_posix()
    if any(rel == t or rel.startswith(t + "/") for t in session.temporaries):
        _remove_tree(p)
        session.temporaries.discard(rel)
        return
    own = {**session.manifest.files, **session.written}
    files, nested = _walk(session.key, [rel])
    for f in files:
        if f in own and own[f] == files[f] and contained(session.key, f):
            with contextlib.suppress(FileNotFoundError):
                (session.key / f).unlink()
            session.written.pop(f, None)
            session.manifest.files.pop(f, None)
    _prune_empty(p)


@fileio.on_write
def _record_write(path: Path, temporary: bool = False) -> None:
    """Every finished write of :mod:`ptmkit.fileio`: recorded in the output that holds it."""
    if not _ACTIVE:
        return
    try:
        where = Path(os.path.realpath(path.parent)) / path.name
    except OSError:
        return
    session = _session_of(where)
    if session is not None:
        session.note(where, temporary)


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


def _plan_clean(d: Path, keep: set[str], removals: list[Path], changed: list[str],
                nested_outputs: list[Path] | None = None) -> None:
    """What ``--overwrite`` removes in ``d``: the files recorded as ptm's and unchanged (into
    ``removals``), with those of the outputs nested in it (into ``nested_outputs``, outermost
    first); a recorded file that changed, or is reached through a link, goes to ``changed``."""
    m = Manifest.read(d)
    if m is None:
        return
    session = _ACTIVE.get(d.resolve())
    own = dict(m.files)
    if session is not None:  # this command's own output: a killed writer's files were adopted at its start
        own = {**session.manifest.files, **session.written}
    elif m.open is not None:  # a nested output whose writer was killed: its journal says what it wrote
        removals += [d / t for t in m.adopt(d) if contained(d, t)]
        own = dict(m.files)
    entries = [n for n in m.entries if n not in keep and os.path.lexists(d / n)]
    files, nested = _walk(d, entries)
    for rel, st in files.items():
        if rel not in own:
            continue  # not written by ptm: stays
        if own[rel] == st and contained(d, rel):
            removals.append(d / rel)
        else:
            changed.append(str(d / rel))
    for sub in nested:
        if Manifest.read(sub) is not None:
            if nested_outputs is not None:
                nested_outputs.append(sub)
            _plan_clean(sub, set(), removals, changed, nested_outputs)


def clean(out: PathLike, keep: Iterable[str] = ()) -> list[str]:
    """``--overwrite``: remove the files ptm wrote in ``out`` (its manifest's entries, except the
    names in ``keep``), then the directories that are left empty.  Every other file stays, and
    a nested output that still holds one keeps its marker (listing it as foreign), so it stays
    ptm's to write into again.  A file ptm wrote that has changed since stops the overwrite
    before anything is removed.  Returns the entries removed or emptied."""
    out = Path(out)
    keep = set(keep)
    m = Manifest.read(out)
    if m is None:
        return []
    removals: list[Path] = []
    changed: list[str] = []
    nested: list[Path] = []
    _plan_clean(out, keep, removals, changed, nested)
    if changed:
        it = "it" if len(changed) == 1 else "them"
        raise PtmError(
            f"cannot overwrite {out}: {_sample(changed)} changed since ptm wrote {it}, and ptm removes only its own "
            f"unchanged files; move {it} away and run the command again"
        )
    removed = [n for n in m.entries if n not in keep and os.path.lexists(out / n)]
    for p in removals:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)  # a killed writer's temporary directory
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    for sub in reversed(nested):  # innermost first
        _retire(sub)
    for name in removed:
        _prune_empty(out / name)
    session = _ACTIVE.get(out.resolve())
    if session is not None:  # forget the removed files; the entries stay declared for the new output
        session.manifest.files = {f: s for f, s in session.manifest.files.items() if (out / f).exists()}
        session.written = {f: s for f, s in session.written.items() if (out / f).exists()}
    return removed


def _retire(sub: Path) -> None:
    """A nested output whose files ``--overwrite`` removed: gone when nothing else is in it, else
    its marker stays and lists what is left as the user's."""
    m = Manifest.read(sub)
    if m is None:
        return
    for name in m.entries:
        _prune_empty(sub / name)
    try:
        left = _content(sub)
    except PtmError:
        return
    if not left:
        for name in BOOKKEEPING:
            with contextlib.suppress(OSError):
                (sub / name).unlink()
        return
    m.entries = [n for n in m.entries if os.path.lexists(sub / n)]
    files, _ = _walk(sub, m.entries)
    m.files, m.foreign, m.open = {}, files, None
    m.write(sub)


def _prune_empty(p: Path) -> None:
    """Remove the empty directories under ``p`` (and ``p``), bottom up; stale lock files of
    nested outputs whose marker is gone count as empty."""
    if not p.is_dir() or p.is_symlink():
        return
    for sub in list(p.iterdir()):
        _prune_empty(sub)
    if not (p / MARKER).exists():
        for name in (LOCK, JOURNAL):
            with contextlib.suppress(OSError):
                (p / name).unlink()
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


__all__ = ["Session", "clean", "discard", "staged", "writing"]
