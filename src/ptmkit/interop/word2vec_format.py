"""word2vec text/binary and GloVe text formats for word vectors.

- word2vec text: header ``"V D\\n"``, then ``"word v1 ... vD\\n"`` per word.
- word2vec binary: the same header, then per word ``word`` + ``b" "`` + D little-endian float32
  (written without a trailing newline, byte-identical to gensim's ``save_word2vec_format``;
  files from word2vec.c, which add a newline after each vector, are read too).
- GloVe text: no header, ``"word v1 ... vD"`` per line.

Text values are written with ``%.9g`` so float32 vectors survive a text round trip exactly.
Every reader raises :class:`PtmError` naming the file and the problem on malformed input, and on a
vector holding a NaN or an infinity (naming the first such word and its line); with
``skip_nonfinite=True`` those words are left out instead, with a warning.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError, require_file
from ptmkit.fileio import atomic_write_bytes

log = logging.getLogger(__name__)

FORMATS = ("word2vec", "word2vec-binary", "glove")


# ----------------------------------------------------------------------------- writing


def _check_words(words: list[str], vectors: np.ndarray) -> None:
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise PtmError(f"{len(words)} words but vectors of shape {tuple(vectors.shape)}")
    for w in words:
        if not w or any(ch.isspace() for ch in w):
            raise PtmError(f"word {w!r} is empty or contains whitespace; it cannot be stored in a word-vectors file")


def _text_lines(words: list[str], vectors: np.ndarray) -> io.StringIO:
    row_fmt = " ".join(["%.9g"] * vectors.shape[1])
    buf = io.StringIO()
    for w, row in zip(words, vectors.tolist()):
        buf.write(f"{w} {row_fmt % tuple(row)}\n")
    return buf


def write_word2vec(path: str | os.PathLike, words: list[str], vectors: np.ndarray, binary: bool = True) -> None:
    """Write ``vectors`` (float [V, D]) with row i labelled ``words[i]``."""
    vectors = np.asarray(vectors, dtype=np.float32)
    _check_words(words, vectors)
    header = f"{vectors.shape[0]} {vectors.shape[1]}\n".encode()
    if binary:
        rows = vectors.astype("<f4", copy=False)
        parts = [header]
        for w, row in zip(words, rows):
            parts.append(w.encode("utf-8") + b" " + row.tobytes())
        atomic_write_bytes(path, b"".join(parts))
    else:
        atomic_write_bytes(path, header + _text_lines(words, vectors).getvalue().encode("utf-8"))


def write_glove(path: str | os.PathLike, words: list[str], vectors: np.ndarray) -> None:
    vectors = np.asarray(vectors, dtype=np.float32)
    _check_words(words, vectors)
    atomic_write_bytes(path, _text_lines(words, vectors).getvalue().encode("utf-8"))


# ----------------------------------------------------------------------------- reading


def _parse_header(line: bytes) -> tuple[int, int] | None:
    parts = line.split()
    if len(parts) != 2:
        return None
    try:
        v, d = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return (v, d) if v >= 0 and d > 0 else None


def _floats(fields: list[str]) -> bool:
    try:
        [float(x) for x in fields]
    except ValueError:
        return False
    return True


def detect_format(path: str | os.PathLike) -> str:
    """``"word2vec"``, ``"word2vec-binary"`` or ``"glove"``, from the file's first bytes."""
    path = require_file(path, "vectors file")
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    first, _, rest = head.partition(b"\n")
    header = _parse_header(first)
    if header is not None:
        line = rest.split(b"\n", 1)[0]
        try:
            fields = line.decode("utf-8").rstrip().split(" ")
        except UnicodeDecodeError:
            return "word2vec-binary"
        if len(fields) == header[1] + 1 and _floats(fields[1:]):
            return "word2vec"
        return "word2vec-binary"
    try:
        fields = first.decode("utf-8").rstrip().split(" ")
    except UnicodeDecodeError:
        fields = []
    if len(fields) >= 2 and _floats(fields[1:]):
        return "glove"
    raise PtmError(
        f"{path} is not a word-vectors file: expected a word2vec header 'V D' or GloVe lines 'word v1 v2 ...'"
    )


def read_vectors(path: str | os.PathLike, format: str = "auto", skip_nonfinite: bool = False) -> tuple[list[str], np.ndarray]:
    """Read a word-vectors file; returns (words [V], float32 vectors [V, D]).  A vector holding a
    NaN or an infinity is an error, or with ``skip_nonfinite`` its word is left out."""
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "word2vec":
        return read_word2vec(path, binary=False, skip_nonfinite=skip_nonfinite)
    if fmt == "word2vec-binary":
        return read_word2vec(path, binary=True, skip_nonfinite=skip_nonfinite)
    if fmt == "glove":
        return read_glove(path, skip_nonfinite=skip_nonfinite)
    raise PtmError(f"unknown vectors format {format!r}; use one of auto, {', '.join(FORMATS)}")


def read_word2vec(path: str | os.PathLike, binary: bool = True, skip_nonfinite: bool = False) -> tuple[list[str], np.ndarray]:
    path = require_file(path, "vectors file")
    data = path.read_bytes()
    first, _, _ = data.partition(b"\n")
    header = _parse_header(first)
    if header is None:
        raise PtmError(f"{path}: first line {first[:60]!r} is not a word2vec header 'V D'")
    v, d = header
    pos = len(first) + 1
    if binary:
        words, vectors = _read_binary_body(path, data, pos, v, d)
        return _finite_rows(path, words, vectors, skip_nonfinite, lambda i: f"vector {i + 1} of {v}")
    words, vectors = _read_text_body(path, data[pos:], d, expected=v, first_line_no=2)
    return _finite_rows(path, words, vectors, skip_nonfinite, lambda i: f"line {i + 2}")


def _finite_rows(path: Path, words: list[str], vectors: np.ndarray, skip: bool,
                 where: Callable[[int], str]) -> tuple[list[str], np.ndarray]:
    """``(words, vectors)`` whose rows are all finite: a row holding a NaN or an infinity (``where(i)``
    says where row i is in the file) is an error, or with ``skip`` left out with a warning."""
    bad = ~np.isfinite(vectors).all(axis=1)  # bool [V]
    if not bad.any():
        return words, vectors
    first = int(np.argmax(bad))
    value = vectors[first][~np.isfinite(vectors[first])][0]
    at = f"{words[first]!r}, {where(first)}"
    if not skip:
        raise PtmError(
            f"{path}: the vector of {words[first]!r} ({where(first)}) holds a non-finite value ({value}); "
            f"{int(bad.sum())} of {len(words)} vectors do. Fix the file, or skip them: --skip-nonfinite"
        )
    if bad.all():
        raise PtmError(f"{path}: every one of its {len(words)} vectors holds NaN or inf (the first: {at})")
    log.warning("%s: left out %d of %d words whose vectors hold NaN or inf (the first: %s)", path, int(bad.sum()),
                len(words), at)
    keep = np.flatnonzero(~bad)
    return [words[i] for i in keep], vectors[keep]


def _read_binary_body(path: Path, data: bytes, pos: int, v: int, d: int) -> tuple[list[str], np.ndarray]:
    width = 4 * d
    words: list[str] = []
    offsets = np.empty(v, dtype=np.int64)
    n = len(data)
    for i in range(v):
        while pos < n and data[pos] == 0x0A:  # word2vec.c writes a newline after each vector
            pos += 1
        sp = data.find(b" ", pos, pos + 10_000)
        if sp < 0 or sp + 1 + width > n:
            raise PtmError(f"{path} is truncated or not in word2vec binary format: word {i + 1} of {v} is incomplete")
        try:
            words.append(data[pos:sp].decode("utf-8"))
        except UnicodeDecodeError:
            raise PtmError(f"{path}: word {i + 1} is not UTF-8; is this a word2vec binary file?") from None
        offsets[i] = sp + 1
        pos = sp + 1 + width
    if data[pos:].strip(b"\n"):
        raise PtmError(f"{path}: {len(data) - pos} unexpected bytes after the {v} vectors the header announces")
    vectors = np.empty((v, d), dtype=np.float32)
    for i in range(v):
        vectors[i] = np.frombuffer(data, dtype="<f4", count=d, offset=int(offsets[i]))
    return words, vectors


def _read_text_body(path: Path, body: bytes, d: int | None, expected: int | None, first_line_no: int):
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PtmError(f"{path} is not UTF-8 text (byte {exc.start}); is it a binary file?") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if expected is not None and len(lines) != expected:
        raise PtmError(f"{path}: the header announces {expected} vectors but the file has {len(lines)} lines")
    if not lines:
        raise PtmError(f"{path} holds no vectors")
    words: list[str] = []
    rests: list[str] = []
    for line in lines:
        word, _, rest = line.rstrip().partition(" ")
        words.append(word)
        rests.append(rest)
    if d is None:
        d = len(rests[0].split())
    flat = _parse_floats(" ".join(rests))
    if flat is None or flat.size != len(lines) * d:
        for i, rest in enumerate(rests):  # find the first bad line for the message
            fields = rest.split()
            line_no = i + first_line_no
            if len(fields) != d:
                raise PtmError(f"{path}: line {line_no} has {len(fields)} values (expected {d} numbers after the word)")
            bad = next((x for x in fields if not _floats([x])), None)
            if bad is not None:
                raise PtmError(f"{path}: line {line_no} (word {words[i]!r}): {bad!r} is not a number")
        raise PtmError(f"{path}: could not parse the vectors")
    return words, flat.reshape(len(lines), d).astype(np.float32)


def _parse_floats(text: str) -> np.ndarray | None:
    try:
        return np.array(text.split(), dtype=np.float32)
    except ValueError:
        return None


def read_glove(path: str | os.PathLike, skip_nonfinite: bool = False) -> tuple[list[str], np.ndarray]:
    path = require_file(path, "vectors file")
    words, vectors = _read_text_body(path, path.read_bytes(), None, None, first_line_no=1)
    return _finite_rows(path, words, vectors, skip_nonfinite, lambda i: f"line {i + 1}")
