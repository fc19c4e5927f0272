"""Writing files and directories so that a crash never leaves a half-written one.

Every writer in ptmkit goes through these helpers:

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: a temporary file in the same
  directory, flushed, then renamed over the target (``os.replace``): a reader sees the old
  file or the new one, never a mix.
* :func:`atomic_dir`: a directory written as a whole (a checkpoint): a temporary sibling that
  replaces the target in one rename; the previous copy is removed only afterwards.
* :func:`replace_dir`: move a finished directory into place, the previous one removed last.
* :func:`staged_dir`: a new output built in a scratch directory *inside* the output directory,
  whose entries are moved up only when the whole block succeeded (see :mod:`ptmkit.outputs`,
  which decides what may be replaced there).

``durable=True`` also fsyncs the data and the directory entry, so a power cut after the call
returns cannot lose the write; caches pass ``durable=False`` to skip that cost.

Every file and directory these helpers create gets the mode an ordinary ``open`` or ``mkdir``
would give it, ``0o666 & ~umask`` / ``0o777 & ~umask`` (``mkstemp`` and ``mkdtemp`` alone make
them private): a run can be shared with the group the user's umask allows.  ``ptm --private``
sets the umask to ``077`` for the whole command.

Each finished write is reported to the recorders registered with :func:`on_write` (the output
manifest records there, at write time, which files ptm wrote: :mod:`ptmkit.outputs`).  A name
that comes from data (a model label, a task name) becomes a path part only through
:func:`path_part`.

Disk-full and permission errors become a :class:`~ptmkit.errors.PtmError` naming the file
(:func:`write_error`): they are the user's to fix, not a bug.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ptmkit.errors import USER_ERRNOS, PtmError, os_error_message

TMP_PREFIX = ".tmp-"  # temporary files and sibling directories (ignored by readers, removed on retry)
STAGING_PREFIX = ".ptmkit-staging-"  # scratch directories of staged outputs, inside the output
NAME_MAX = 255  # bytes of one path component on the usual file systems (ext4, XFS, APFS, NTFS)

_RECORDERS: list[Callable[[Path, bool], None]] = []


def on_write(recorder: Callable[[Path, bool], None]) -> Callable[[Path, bool], None]:
    """Register ``recorder(path, temporary)``, called after every finished write of a file or
    directory (a directory: once, after it was moved into place whole), and with
    ``temporary=True`` when a temporary file or directory is made (debris if the process dies)."""
    _RECORDERS.append(recorder)
    return recorder


def record(path: str | os.PathLike[str], temporary: bool = False) -> Path:
    """Report a finished write of ``path`` to the recorders.  Writers outside this module (a
    plot, an appended log line, a third-party writer) call it once their file is complete."""
    path = Path(path)
    if not temporary:
        normalize_modes(path)
    for recorder in _RECORDERS:
        recorder(path, temporary)
    return path


def normalize_modes(path: str | os.PathLike[str]) -> None:
    """Give ``path`` (and everything under it, for a directory) the modes the umask gives a new
    file or directory: writers outside this module choose their own (safetensors makes its files
    600), and a finished output should be as shareable as the user's umask says."""
    path = Path(path)
    if path.is_symlink() or not path.exists():
        return
    fmode, dmode = file_mode(), dir_mode()
    items = [path] if not path.is_dir() else [path, *path.rglob("*")]
    for p in items:
        if p.is_symlink():
            continue
        want = dmode if p.is_dir() else fmode
        with contextlib.suppress(OSError):
            if (os.stat(p).st_mode & 0o7777) != want:
                os.chmod(p, want)


def umask() -> int:
    """The process's umask, read without changing it where the system allows (a change, even
    undone at once, would race with another thread creating a file)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file: ``0o666 & ~umask``."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """The mode ``mkdir`` would give a new directory: ``0o777 & ~umask``."""
    return 0o777 & ~umask()


def path_part(name: object, what: str = "name") -> str:
    """``name`` as one component of an output path, or a :class:`PtmError` saying why it cannot
    be one.  Every path part that comes from data (a model label, a task name, a contender's
    label) passes through here, so no such name can climb out of the output (``..``, a
    separator, an absolute path), hide (``.``, empty), break the file system (NUL, control
    characters, more than :data:`NAME_MAX` bytes) or be mistaken for ptm's bookkeeping (a
    leading ``.ptmkit`` or ``.tmp-``).  ``what`` names the thing in the message."""
    text = str(name)
    problem = None
    if text in ("", ".", ".."):
        problem = "is not a name"
    elif "/" in text or "\\" in text or os.sep in text or (os.altsep and os.altsep in text):
        problem = "contains a path separator"
    elif any(ord(c) < 32 or ord(c) == 127 for c in text):
        problem = "contains a control character"
    elif len(text.encode("utf-8", "surrogateescape")) > NAME_MAX:
        problem = f"is longer than {NAME_MAX} bytes"
    elif text.startswith((".ptmkit", TMP_PREFIX)):
        problem = "looks like one of ptm's own bookkeeping files"
    if problem is not None:
        raise PtmError(f"the {what} {text!r} cannot name a file or directory: it {problem}; choose another {what}")
    return text


def path_label(path: str | os.PathLike[str]) -> str:
    """How a model given by ``path`` is named in tables and output paths: its file or directory
    name, the resolved one for ``.`` or ``..`` (``ptm evaluate ..`` from inside a run is labelled
    by that run, never ``..``)."""
    p = Path(path)
    name = p.name if p.name not in ("", ".", "..") else p.resolve().name
    return name or "model"


def distinct_parts(names: list[str], what: str = "name") -> list[str]:
    """``names`` each checked by :func:`path_part`, refused when two differ only by case: on a
    case-insensitive file system (macOS, Windows) they would be one directory."""
    seen: dict[str, str] = {}
    for n in names:
        path_part(n, what)
        other = seen.setdefault(n.casefold(), n)
        if other != n:
            raise PtmError(f"the {what}s {other!r} and {n!r} differ only by case and would name the same directory "
                           f"on a case-insensitive file system; rename one of them")
    return names



def _disk_full(exc: BaseException, where: Path | None) -> bool:
    """Whether a non-``OSError`` failure was a full disk: libraries report it their own way
    (safetensors: "... (os error 28)", torch.save: "unexpected pos ..."), but a failed write
    leaves the file system full to the brim, so little free space at ``where`` tells."""
    if "os error 28" in str(exc) or "No space left" in str(exc):
        return True
    if where is None:
        return False
    try:
        st = os.statvfs(where)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


class WriteError(PtmError):
    """A write that failed for a reason the user can fix (full disk, no permission, bad path)."""

    def __init__(self, path: str | os.PathLike[str], reason: str, advice: str, detail: str = "") -> None:
        self.path, self.reason, self.advice = path, reason, advice
        super().__init__(f"could not write {path}: {reason}; {advice}" + (f" ({detail})" if detail else ""))


def write_error(exc: BaseException, path: str | os.PathLike[str], detail: str = "",
                scratch: Path | None = None) -> WriteError | None:
    """A :class:`WriteError` saying which ``path`` could not be written and what to do, or ``None``
    when ``exc`` is not an error the user can fix (then the caller re-raises it as a bug).
    ``scratch``: where the failed write went (checked for a full disk while it is still full).
    A ``WriteError`` from a file written inside ``path`` is restated for ``path`` itself: the user
    needs to know which output failed, not the name of a temporary file in it."""
    if isinstance(exc, WriteError):
        return WriteError(path, exc.reason, exc.advice, detail)
    if isinstance(exc, PtmError) or not isinstance(exc, Exception):
        return None
    if isinstance(exc, OSError):
        code = exc.errno or 0
        reason = exc.strerror or type(exc).__name__
        path = exc.filename if code != errno.ENOENT and exc.filename else path
    elif _disk_full(exc, scratch):
        code, reason = errno.ENOSPC, os.strerror(errno.ENOSPC)
    else:
        return None
    advice = USER_ERRNOS.get(code)
    if advice is None:
        return None
    return WriteError(path, reason, advice, detail)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file or directory to disk (directories: so that a rename in them is durable)."""
    path = Path(path)
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p`` that reports an unwritable or impossible location as a :class:`PtmError`."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PtmError(f"{path} exists and is not a directory; choose another path") from None
    except OSError as exc:
        raise (write_error(exc, path) or exc) from exc
    return path


def make_tmp_dir(parent: str | os.PathLike[str], prefix: str = TMP_PREFIX) -> Path:
    """A new empty directory in ``parent`` with the usual permissions (``mkdtemp`` makes it
    private, but what is written there becomes an ordinary output directory)."""
    parent = make_dirs(parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise (write_error(exc, parent) or exc) from exc
    os.chmod(tmp, dir_mode())
    return record(tmp, temporary=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically (temporary file in the same directory + ``os.replace``)."""
    with atomic_stream(path, durable) as f:
        f.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_stream(path: str | os.PathLike[str], durable: bool = True) -> Iterator[io.BufferedRandom]:
    """A binary file object for writing ``path`` piece by piece (an output too large to hold in
    memory): it writes a temporary file in the same directory, which replaces ``path`` only when
    the block ends without an error (else it is removed and ``path`` is unchanged)."""
    path = Path(path)
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    except OSError as exc:
        raise (write_error(exc, path) or exc) from exc
    record(tmp, temporary=True)
    try:
        os.fchmod(fd, file_mode())  # mkstemp's 0o600 would make the output private
        with os.fdopen(fd, "w+b") as f:
            yield f  # type: ignore[misc]
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if err := write_error(exc, path, "the previous file is unchanged"):
            raise err from exc
        raise
    if durable:
        fsync_path(path.parent)
    record(path)


def append_text(path: str | os.PathLike[str], text: str) -> Path:
    """Append UTF-8 ``text`` to ``path`` (a log that grows line by line; a line cut by a kill is
    the reader's to skip) and record the write."""
    path = Path(path)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise (write_error(exc, path) or exc) from exc
    return record(path)


def read_record(path: str | os.PathLike[str], fix: str, missing_ok: bool = False) -> dict | None:
    """The JSON object in ``path``, a record ptm wrote (a run's config, a finished run's results,
    a corpus's meta), or a :class:`PtmError` naming ``path`` and the ``fix`` when it cannot be
    read: a damaged record is never taken as an empty one, nor as "no constraint".  ``missing_ok``:
    ``None`` for a missing file (the caller knows what its absence means)."""
    path = Path(path)
    if missing_ok and not os.path.lexists(path):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PtmError(f"{path} is missing; {fix}") from None
    except (OSError, ValueError) as exc:
        raise PtmError(f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc}); {fix}") from exc
    if not isinstance(data, dict):
        raise PtmError(f"{path} is damaged (not a JSON object); {fix}")
    return data


def save_figure(fig: object, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Save a Matplotlib figure to ``path`` atomically (its format from the suffix)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi)  # type: ignore[attr-defined]
    return atomic_write_bytes(path, buf.getvalue())


def atomic_write_text(path: str | os.PathLike[str], text: str, durable: bool = True) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"), durable)


def replace_dir(new: str | os.PathLike[str], final: str | os.PathLike[str], durable: bool = True) -> None:
    """Move directory ``new`` to ``final``.  An existing ``final`` is moved aside first (a rename
    onto a non-empty directory is not allowed) and deleted only once ``new`` is in place; if the
    move fails the previous ``final`` is put back."""
    new, final = Path(new), Path(final)
    old = None
    if final.exists():
        old = make_tmp_dir(final.parent, TMP_PREFIX + "old-")
        os.rename(final, old / final.name)
    try:
        os.rename(new, final)
    except BaseException:
        if old is not None:
            os.rename(old / final.name, final)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if durable:
        fsync_path(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    record(final)


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike[str], durable: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling directory; when the block succeeds it replaces ``final``.

    On an exception the temporary directory is removed and ``final`` is untouched; a disk-full
    or permission error becomes a :class:`PtmError` naming ``final``.
    """
    final = Path(final)
    tmp = make_tmp_dir(final.parent)
    try:
        yield tmp
        if durable:
            for f in tmp.rglob("*"):
                if f.is_file():
                    fsync_path(f)
            fsync_path(tmp)
        replace_dir(tmp, final, durable)
    except BaseException as exc:
        kept = f"the previous {final.name} is kept" if final.exists() else f"{final.name} was not written"
        err = write_error(exc, final, kept, scratch=tmp)  # before the removal frees the space again
        shutil.rmtree(tmp, ignore_errors=True)
        if err is not None:
            raise err from exc
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost ancestor of ``path`` (or ``path`` itself) that does not exist yet."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike[str], before_publish: Callable[[list[str]], None] | None = None) -> Iterator[Path]:
    """Yield an empty scratch directory inside ``out`` (created if missing); when the block
    succeeds, ``before_publish(names)`` runs with the names of the new entries (it may remove
    what they replace) and the entries are moved up into ``out``.

    The scratch directory lies inside ``out`` rather than beside it so that ``out`` may be any
    directory, ``.`` included, and a parent need not be writable.  On failure the scratch
    directory is removed; ``out`` itself is left to the caller (:func:`ptmkit.outputs.staged`
    removes the directories it created, once nothing else is in them).
    """
    out = Path(out)
    make_dirs(out)
    for stale in out.glob(STAGING_PREFIX + "*"):  # left by a killed earlier attempt
        shutil.rmtree(stale, ignore_errors=True)
    tmp = make_tmp_dir(out, STAGING_PREFIX)
    try:
        yield tmp
        names = sorted(p.name for p in tmp.iterdir())
        if before_publish is not None:
            before_publish(names)
        for name in names:
            os.replace(tmp / name, out / name)
            record(out / name)
        tmp.rmdir()
        fsync_path(out)
    except BaseException as exc:
        err = write_error(exc, out, "nothing was replaced", scratch=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if err is not None:
            raise err from exc
        raise


__all__ = [
    "NAME_MAX",
    "STAGING_PREFIX",
    "TMP_PREFIX",
    "WriteError",
    "append_text",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "dir_mode",
    "distinct_parts",
    "file_mode",
    "first_missing",
    "fsync_path",
    "make_dirs",
    "make_tmp_dir",
    "normalize_modes",
    "on_write",
    "os_error_message",
    "path_label",
    "path_part",
    "read_record",
    "record",
    "replace_dir",
    "save_figure",
    "staged_dir",
    "umask",
    "write_error",
]
