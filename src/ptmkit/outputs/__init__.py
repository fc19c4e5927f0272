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
* a file is ptm's only if ptm recorded it when it wrote it (every writer of
  :mod:`ptmkit.fileio` reports to the output that holds the file, which keeps a journal); a file
  found in one of ptm's directories after a crash or a failed command stays the user's;
* a command that fails removes only what it created itself (:func:`writing`, :func:`staged`):
  the entries it added and the directories it made, each only once nothing else is left in it.

While a command writes, the manifest says so (``open``) and its journal (``.ptmkit-journal``)
grows by a line per finished write.  If the process is killed, the next command on the
directory adopts exactly the files the journal records and removes the temporaries it made;
every other file there stays the user's (the manifest lists those under ``foreign``).  A marker
that cannot be read, or that names a path outside its directory, is refused with a message
naming it: ptm then neither writes nor removes anything there.
"""

from ptmkit.outputs.checks import check, check_inputs
from ptmkit.outputs.kinds import JOURNAL, KINDS, LOCK, MARKER, Kind
from ptmkit.outputs.lock import locked
from ptmkit.outputs.manifest import Manifest, owned_entries, owner
from ptmkit.outputs.session import Session, clean, discard, staged, writing

__all__ = ["JOURNAL", "KINDS", "LOCK", "MARKER", "Kind", "Manifest", "Session", "check", "check_inputs", "clean", "discard", "locked",
           "owned_entries", "owner", "staged", "writing"]
