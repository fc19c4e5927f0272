"""What a run was trained on, as checkable facts: file and directory fingerprints.

A resumed run must see the data it started with; a name and a size are not enough (another
corpus prepared with the same tokenizer, or the test set given as ``--train``).  A fingerprint is
the SHA-256 of the content: of a file, or of a directory's files in path order (ptm's
bookkeeping excluded).  Hashing streams the bytes (about 1 GB/s), once per command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmError

SKIP = (".ptmkit-output.json", ".ptmkit-lock")


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"name", "bytes", "sha256"}`` of a file, or of a directory's files (each file's relative
    path and digest enter the directory's digest, so a renamed or moved file changes it too)."""
    p = Path(path)
    if not p.exists():
        raise PtmError(f"not found: {p}")
    if p.is_dir():
        h = hashlib.sha256()
        total = 0
        for f in sorted(q for q in p.rglob("*") if q.is_file() and q.name not in SKIP):
            rel = f.relative_to(p).as_posix()
            h.update(rel.encode("utf-8") + b"\0" + file_sha256(f).encode() + b"\n")
            total += f.stat().st_size
        return {"name": p.name, "bytes": total, "sha256": h.hexdigest()}
    return {"name": p.name, "bytes": p.stat().st_size, "sha256": file_sha256(p)}


def differences(recorded: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """``key: A in the run, B now`` for every leaf that differs between two nested dicts."""
    out = []
    for key in sorted(set(recorded) | set(now), key=str):
        a, b = recorded.get(key), now.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(differences(a, b, name + "."))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            out.extend(differences(dict(enumerate(a)), dict(enumerate(b)), name + "."))
        elif a != b:
            out.append(f"{name}: {_short(a)} in the run, {_short(b)} now")
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."




def content_sha256(obj: Any) -> str:
    """SHA-256 of a task's data in memory (dataclasses, lists, dicts, strings, numbers, numpy
    arrays), walked in field order: the same examples give the same digest whatever file they
    were read from."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


def _feed(h: Any, obj: Any) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(b"D" + type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            h.update(b"F" + f.name.encode())
            _feed(h, getattr(obj, f.name))
    elif isinstance(obj, np.ndarray):
        h.update(b"A" + str(obj.dtype).encode() + str(obj.shape).encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor (not imported here)
        _feed(h, obj.detach().cpu().numpy())
    elif isinstance(obj, (list, tuple)):
        h.update(b"L%d" % len(obj))
        for x in obj:
            _feed(h, x)
    elif isinstance(obj, dict):
        h.update(b"M%d" % len(obj))
        for k in sorted(obj, key=str):
            _feed(h, str(k))
            _feed(h, obj[k])
    else:
        h.update(b"S" + repr(obj).encode("utf-8", "surrogatepass") + b"\0")


__all__ = ["content_sha256", "differences", "file_sha256", "fingerprint"]
