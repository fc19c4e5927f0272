"""The marker file as a manifest: kind, entries, and the size and mtime of every file ptm wrote."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.outputs.kinds import JOURNAL, KINDS, MARKER, VERSION, PathLike, Stat


def damaged(path: Path, reason: str) -> PtmError:
    """The refusal for a marker or journal that cannot be trusted: ptm cannot tell its files
    from the user's there, so it neither writes nor removes anything."""
    return PtmError(
        f"the marker {path} is damaged ({reason}); ptm cannot tell its files from yours, so it changes "
        f"nothing: restore the marker from a backup, or move your files out of {path.parent} and delete it"
    )


def _read_marker(path: Path) -> dict | None:
    """The marker's JSON object, ``None`` when there is no marker, or :func:`damaged`."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():
        raise damaged(path, "it is not a regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(path, f"unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise damaged(path, "not a JSON object")
    return data


def relative_path(rel: object) -> str | None:
    """``rel`` if it is a relative path inside an output (POSIX parts, none of them empty,
    ``.`` or ``..``), else ``None``: a record naming anything else is not trusted."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return None
    parts = rel.split("/")
    return rel if all(p not in ("", ".", "..") for p in parts) else None


def _stats(data: dict, key: str, path: Path) -> dict[str, Stat]:
    raw = data.get(key) or {}
    if not isinstance(raw, dict):
        raise damaged(path, f"its {key!r} is not a mapping")
    out: dict[str, Stat] = {}
    for k, v in raw.items():
        if relative_path(k) is None:
            raise damaged(path, f"it lists {k!r}, which is not a path inside the directory")
        try:
            size, mtime = v
            out[k] = (int(size), int(mtime))
        except (TypeError, ValueError) as exc:
            raise damaged(path, f"the record of {k!r} is not [size, mtime]") from exc
    return out


@dataclass
class Manifest:
    """The marker's content: ``kind``; ``entries`` (top-level names ptm wrote); ``files``
    (relative path -> (size, mtime_ns) of every file ptm wrote under them, recorded when ptm
    wrote it; nested outputs excluded: they have manifests of their own); ``foreign`` (files
    under ptm's entries that ptm did not write); ``open`` (the command writing now, or killed
    while writing: its journal says what it wrote).

    Every name is checked when the marker is read: an entry must be one plain name and every
    file a relative path without ``..``; a marker that fails (hand-edited, damaged) raises a
    :class:`PtmError` naming it, and is never read as "not ptm's" or "owns nothing"."""

    kind: str
    entries: list[str]
    files: dict[str, Stat]
    foreign: dict[str, Stat]
    open: dict | None = None

    @classmethod
    def read(cls, d: Path) -> Manifest | None:
        path = Path(d) / MARKER
        data = _read_marker(path)
        if data is None or data.get("kind") not in KINDS:
            return None
        kind = data["kind"]
        if data.get("version") != VERSION:  # a marker of an earlier ptmkit: the names it wrote, whole
            names = [n for n in data.get("files") or [] if isinstance(n, str) and "*" not in n and "/" not in n
                     and n not in ("", ".", "..")]
            return cls(kind, names, _walk(Path(d), names)[0], {})
        entries = data.get("entries") or []
        if not isinstance(entries, list):
            raise damaged(path, "its 'entries' is not a list")
        for n in entries:
            if relative_path(n) is None or "/" in n:
                raise damaged(path, f"it lists the entry {n!r}, which is not a name inside the directory")
        files, foreign = _stats(data, "files", path), _stats(data, "foreign", path)
        for rel in files:
            if rel.split("/")[0] not in entries:
                raise damaged(path, f"it lists {rel!r}, which is under none of its entries")
        opened = data.get("open")
        return cls(kind, [str(n) for n in entries], files, foreign, opened if isinstance(opened, dict) else None)

    def content(self) -> tuple:
        """What the marker says, for comparing two manifests (``open`` aside)."""
        return sorted(set(self.entries)), sorted(self.files.items()), sorted(self.foreign.items())

    def write(self, d: Path) -> None:
        data = {"kind": self.kind, "version": VERSION, "entries": sorted(set(self.entries)),
                "files": {k: list(v) for k, v in sorted(self.files.items())},
                "foreign": {k: list(v) for k, v in sorted(self.foreign.items())}}
        if self.open is not None:
            data["open"] = self.open
        fileio.atomic_write_text(d / MARKER, json.dumps(data, indent=1) + "\n", durable=False)

    def adopt(self, d: Path) -> list[str]:
        """A writer that was killed (``open`` set, its lock free): the files its journal records
        become ptm's, with the size and mtime they had when written (one changed since keeps that
        record, so ``--overwrite`` refuses it).  Nothing else found under ptm's entries is adopted.
        Returns the temporary files and directories the journal records (ptm's debris)."""
        written, temporaries = read_journal(d)
        self.files.update({f: s for f, s in written.items() if f.split("/")[0] in self.entries})
        return temporaries


def read_journal(d: Path) -> tuple[dict[str, Stat], list[str]]:
    """The journal of ``d``: the files a command wrote (relative path -> stat when written) and
    the temporaries it made.  A line cut by a kill, or naming a path outside ``d``, is skipped:
    the file it would record stays the user's."""
    written: dict[str, Stat] = {}
    temporaries: list[str] = []
    try:
        lines = (Path(d) / JOURNAL).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return written, temporaries
    for line in lines:
        try:
            rec = json.loads(line)
            if "t" in rec:
                if relative_path(rec["t"]):
                    temporaries.append(rec["t"])
            elif relative_path(rec["f"]):
                written[rec["f"]] = (int(rec["s"][0]), int(rec["s"][1]))
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return written, temporaries


def contained(d: Path, rel: str) -> bool:
    """Whether ``d/rel`` is reached without passing through a link: a recorded path whose
    directory was replaced by a link to elsewhere must not remove a file there."""
    p = Path(d)
    for part in rel.split("/")[:-1]:
        p = p / part
        if p.is_symlink() or not p.is_dir():
            return False
    return True


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


__all__ = ["Manifest", "contained", "damaged", "owned_entries", "owner", "read_journal", "relative_path"]
