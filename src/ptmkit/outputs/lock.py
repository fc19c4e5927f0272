"""One writer per output directory: an advisory ``fcntl`` lock naming its holder."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.outputs.kinds import LOCK, PathLike


def command_line() -> str:
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
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for every file
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
        os.pwrite(self.fd, f"PID {os.getpid()}: {command_line()}\n".encode(), 0)

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


def check_not_locked_above(out: Path, own: Iterable[Path]) -> None:
    """Refuse to write inside an output that another process is writing (a corpus into a run
    directory whose run is under way); ``own``: the outputs this process writes itself."""
    own = set(own)
    for d in out.parents:
        if d in own or not (d / LOCK).exists():
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


__all__ = ["Lock", "check_not_locked_above", "command_line", "locked"]
