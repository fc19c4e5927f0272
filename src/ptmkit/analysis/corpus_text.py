"""The analysis corpus: a text file read line by line, one sentence per line, words split at
whitespace (blank lines skipped), never held in memory whole."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterator

from ptmkit.errors import PtmError


def sentences(path: str | Path, limit: int | None = None) -> Iterator[list[str]]:
    """The non-empty lines of ``path`` as word lists, at most ``limit`` of them."""
    path = Path(path)
    if not path.is_file():
        raise PtmError(f"corpus {path} is not a file: give a text file, one sentence per line")
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if limit is not None and n >= limit:
                return
            n += 1
            yield words


def count_words(path: str | Path, limit: int | None = None) -> tuple[Counter, int]:
    """Word counts and the number of sentences of the first ``limit`` sentences."""
    counts: Counter = Counter()
    n = 0
    for words in sentences(path, limit):
        counts.update(words)
        n += 1
    if not n:
        raise PtmError(f"corpus {path} holds no sentence (no non-empty line)")
    return counts, n


__all__ = ["count_words", "sentences"]
