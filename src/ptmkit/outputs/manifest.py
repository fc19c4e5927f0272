"""The marker file as a manifest: kind, entries, and the size and mtime of every file ptm wrote."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ptmkit import fileio
from ptmkit.outputs.kinds import KINDS, MARKER, VERSION, PathLike, Stat


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


__all__ = ["Manifest", "owned_entries", "owner"]
