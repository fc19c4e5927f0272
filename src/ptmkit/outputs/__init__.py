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

from ptmkit.outputs.checks import check, check_inputs
from ptmkit.outputs.kinds import KINDS, LOCK, MARKER, Kind
from ptmkit.outputs.lock import locked
from ptmkit.outputs.manifest import Manifest, owned_entries, owner
from ptmkit.outputs.session import Session, clean, staged, writing

__all__ = ["KINDS", "LOCK", "MARKER", "Kind", "Manifest", "Session", "check", "check_inputs", "clean", "locked",
           "owned_entries", "owner", "staged", "writing"]
