"""Which directories ptm may write into, and what it may remove there: ownership by manifest.

A directory is ptm's output only if ptm's marker, ``.ptmkit-output.json``, is in it; nothing is
recognised by its contents.  The marker is a manifest: the output's kind, the top-level entries
ptm wrote there, and the size and modification time of every file ptm wrote under them.  The
rules, the same for every command:

* ptm writes into a directory only if it is new, empty, or holds ptm's own output of the same
  kind; a non-empty directory without a marker, or with another kind's, is refused;
* an input that lies inside the output directory is refused before anything is read or written;
* one process writes an output directory at a time: :func:`writing` holds an advisory lock on
  ``.ptmkit-lock`` there (released on exit and on kill), and a second writer is refused with the
  holder's PID and command;
* ``--overwrite`` (:func:`clean`) removes exactly the files the manifest lists, and only if each
  is unchanged since ptm wrote it (size and modification time); a changed one stops the
  overwrite before anything is removed, and a file ptm did not write is never removed;
* a command that fails removes only what it created itself (:func:`writing`, :func:`staged`):
  the entries it added and the directories it made, each only once nothing else is left in it.

While a command writes, the manifest says so (``open``).  If the process is killed, the next
command on the directory adopts the files that appeared or changed under ptm's entries since
the manifest was last written: the dead command wrote them.  Files that were already there and
not ptm's stay the user's (the manifest lists them under ``foreign``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError

MARKER = ".ptmkit-output.json"
LOCK = ".ptmkit-lock"
VERSION = 2
PathLike = str | os.PathLike[str]
Stat = tuple[int, int]  # (size, mtime_ns) of a file ptm wrote


@dataclass(frozen=True)
class Kind:
    """One kind of output directory.

    names: the top-level entries a command of this kind writes in place (a run's ``config.json``,
    ``checkpoints``, ...); staged outputs take the names of what they built instead.
    overwrite: whether its command offers ``--overwrite`` (the refusal message says so).
    """

    label: str
    command: str
    names: tuple[str, ...] = ()
    overwrite: bool = True


KINDS: dict[str, Kind] = {
    "run": Kind("pre-training run", "ptm pretrain", ("config.json", "metrics.jsonl", "loss.png", "checkpoints")),
    "corpus": Kind("prepared corpus", "ptm prepare"),
    "vectors": Kind("static word-vectors run", "ptm pretrain (static model)"),
    "finetune": Kind("fine-tuning output", "ptm finetune",
                     ("results.json", "predictions.jsonl", "metrics.jsonl", "loss.png", "best.safetensors",
                      "checkpoints")),
    "export": Kind("HF transformers export", "ptm export", overwrite=False),
    "checkpoint": Kind("imported checkpoint", "ptm import", overwrite=False),
    "evaluate": Kind("evaluation", "ptm evaluate", ("results.json", "table.md", "table.png")),
    "compare": Kind("comparison", "ptm compare",
                    ("data", "runs", "finetune", "results.json", "table.md", "compare.png")),
    "classifier": Kind("fastText classifier", "ptm fasttext-classify train"),
    "demo": Kind("demo output", "ptm demo",
                 ("text", "demo.png", "results.json", "summary.md"), overwrite=False),
}

BOOKKEEPING = (MARKER, LOCK)


# ------------------------------------------------------------------------------------- manifest


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Manifest:
    """The marker's content: ``kind``; ``entries`` (top-level names ptm wrote); ``files``
    (relative path -> (size, mtime_ns) of every file ptm wrote under them, nested outputs
    excluded: they have manifests of their own); ``foreign`` (files under ptm's entries that
    ptm did not write); ``open`` (the command writing now, or killed while writing)."""

    kind: str
    entries: list[str]
    files: dict[str, Stat]
    foreign: dict[str, Stat]
    open: dict | None = None

    @classmethod
    def read(cls, d: Path) -> Manifest | None:
        data = _read_json(d / MARKER)
        kind = data.get("kind")
        if kind not in KINDS:
            return None
        if data.get("version") != VERSION:  # a marker of an earlier ptmkit: names listed, no file record
            names = [n for n in data.get("files") or [] if isinstance(n, str) and "*" not in n and "/" not in n]
            return cls(kind, names, {}, {}, {"pid": None, "command": "an earlier ptmkit"})

        def stats(key: str) -> dict[str, Stat]:
            raw = data.get(key) or {}
            return {str(k): (int(v[0]), int(v[1])) for k, v in raw.items()} if isinstance(raw, dict) else {}

        entries = [str(n) for n in data.get("entries") or []]
        return cls(kind, entries, stats("files"), stats("foreign"), data.get("open"))

    def write(self, d: Path) -> None:
        data = {"kind": self.kind, "version": VERSION, "entries": sorted(set(self.entries)),
                "files": {k: list(v) for k, v in sorted(self.files.items())},
                "foreign": {k: list(v) for k, v in sorted(self.foreign.items())}}
        if self.open is not None:
            data["open"] = self.open
        fileio.atomic_write_text(d / MARKER, json.dumps(data, indent=1) + "\n", durable=False)


def owner(d: PathLike) -> str | None:
    """The kind of ptm output ``d`` holds (from its marker), or ``None``."""
    m = Manifest.read(Path(d))
    return None if m is None else m.kind


def owned_entries(d: PathLike) -> list[Path]:
    """The top-level entries of ``d`` that ptm wrote (by its marker) and that exist."""
    d = Path(d)
    m = Manifest.read(d)
    return [] if m is None else [d / n for n in sorted(set(m.entries)) if os.path.lexists(d / n)]


def _stat(p: Path) -> Stat:
    st = p.lstat()
    return st.st_size, st.st_mtime_ns


def _walk(d: Path, names: Iterable[str]) -> tuple[dict[str, Stat], list[Path]]:
    """Files under the entries ``names`` of ``d`` (relative path -> stat; symbolic links count as
    files and are not followed), and the nested ptm outputs found there (directories with a
    marker of their own, not descended into)."""
    files: dict[str, Stat] = {}
    nested: list[Path] = []
    stack = [d / n for n in names]
    while stack:
        p = stack.pop()
        if not os.path.lexists(p):
            continue
        if p.is_dir() and not p.is_symlink():
            if (p / MARKER).is_file() and p != d:
                nested.append(p)
                continue
            try:
                stack.extend(p.iterdir())
            except OSError:
                continue
        else:
            files[p.relative_to(d).as_posix()] = _stat(p)
    return files, nested


# ------------------------------------------------------------------------------------- checking


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
                    f"inputs are (a new output or --overwrite could destroy them): choose an output directory "
                    f"outside your inputs"
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
            f"only into a new or empty directory or one holding its own {spec.label}, and never replaces files it "
            f"did not write: choose a new output directory"
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


# ------------------------------------------------------------------------------------- the lock


def _command_line() -> str:
    argv = [os.path.basename(sys.argv[0]) or "python", *sys.argv[1:]] if sys.argv else ["python"]
    text = " ".join(argv)
    return text if len(text) <= 300 else text[:297] + "..."


class Lock:
    """An advisory ``fcntl`` lock on ``d/.ptmkit-lock`` (or the file ``path``), holding the
    writer's PID and command.  The kernel releases it when the process exits or is killed."""

    def __init__(self, d: Path, what: str, path: Path | None = None) -> None:
        self.path = d / LOCK if path is None else path
        for _ in range(100):
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise (fileio.write_error(exc, self.path) or exc) from exc
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.read(self.fd, 1000).decode("utf-8", "replace").strip() or "another process"
                os.close(self.fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise PtmError(
                        f"{what} {d} is being written by another ptm process ({holder}); wait for it to finish, "
                        f"or choose another directory"
                    ) from None
                raise
            # The holder removes the file when it releases the lock: a lock taken on a file that was
            # unlinked meanwhile is no lock, so take it again on the file now at the path.
            try:
                if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(self.fd)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"PID {os.getpid()}: {_command_line()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # before closing, while it is still ours
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = -1


@contextlib.contextmanager
def locked(d: PathLike, what: str = "the directory", path: PathLike | None = None) -> Iterator[None]:
    """Hold the lock of ``d`` (its lock file, or ``path``: the data cache locks a data set's
    directory through a file beside it, since the directory is replaced whole)."""
    lock = Lock(Path(d), what, None if path is None else Path(path))
    try:
        yield
    finally:
        lock.release()


# ------------------------------------------------------------------------------------- writing

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
        m.open = {"pid": os.getpid(), "command": _command_line()}
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


def _check_not_locked_above(out: Path) -> None:
    """Refuse to write inside an output that another process is writing (a corpus into a run
    directory whose run is under way)."""
    for d in out.parents:
        if d in _ACTIVE or not (d / LOCK).exists():
            continue
        try:
            fd = os.open(d / LOCK, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 1000).decode("utf-8", "replace").strip() or "another process"
            raise PtmError(
                f"the output directory {d} is being written by another ptm process ({holder}); wait for it to "
                f"finish before writing inside it, or choose another directory"
            ) from None
        finally:
            os.close(fd)


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
    _check_not_locked_above(key)
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


__all__ = ["KINDS", "LOCK", "MARKER", "Manifest", "Session", "check", "check_inputs", "clean", "locked", "owned_entries",
           "owner", "staged", "writing"]
