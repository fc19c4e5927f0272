"""Duplicate documents removed while a corpus is read: exact copies, or near copies (MinHash LSH).

Both compare the *normalised* document: Unicode NFKC, lower-cased, every run of whitespace (line
breaks included) one space.

- ``exact``: an 8-byte BLAKE2b digest of the normalised text; a document whose digest was seen
  before is dropped.  Memory: one Python int in a set per kept document (about 70 bytes).
- ``near``: MinHash of the set of word 5-grams (shingles; a document of fewer words is one
  shingle), ``num_perm`` = 128 hash functions, split into ``b`` bands of ``r`` rows chosen for the
  Jaccard ``threshold`` (the ``b``, ``r`` that minimise the equally weighted areas of false positives
  below and false negatives above it, the choice ``datasketch.MinHashLSH`` makes; 9 x 13 for 0.8).
  A document sharing any band with a kept document is dropped: a pair of Jaccard similarity ``s``
  is caught with probability ``1 - (1 - s**r)**b`` (Leskovec, Rajaraman and Ullman, *Mining of
  Massive Datasets*, ch. 3; for 9 x 13: 0.5: 0.001, 0.7: 0.08, 0.8: 0.40, 0.9: 0.93, 0.95: 0.998),
  an S-curve around the threshold, not a step at it.  Memory: ``b`` band keys in sets per kept
  document (about 0.6 KB), and while one document is hashed, its words and their hashes and a
  [128, ``SLICE``] block of 8-byte permuted hashes (2 MiB).

The shingles are hashed with numpy over the words' CRC-32s, and the permutations are
multiply-shift hashes of them, so no Python loop runs over the words.  (``datasketch`` computes
signatures and bands of the same kind, but hashes shingles one Python call at a time and keeps
about 3 KB per document in its index.)  The documents are compared in input order: the first of a
group of duplicates is kept.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ptmkit.errors import PtmError

METHODS = ("exact", "near")
NUM_PERM = 128
SHINGLE = 5  # words per shingle
SLICE = 2048  # shingles hashed at once: SLICE x NUM_PERM x 8 bytes (2 MiB) of scratch
DEFAULT_THRESHOLD = 0.8
_SEED = 0x5EED_D0C5
_MASK = (1 << 64) - 1


def normalise(text: str) -> str:
    """NFKC, lower-cased, whitespace runs as one space, no space at either end."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


class Dedup:
    """Drops documents seen before (``method`` ``"exact"`` or ``"near"``), counting what it drops."""

    def __init__(self, method: str, threshold: float = DEFAULT_THRESHOLD) -> None:
        if method not in METHODS:
            raise PtmError(f"--dedup {method!r}: expected one of {', '.join(METHODS)}")
        if not 0.0 < threshold < 1.0:
            raise PtmError(f"--dedup-threshold must be a Jaccard similarity between 0 and 1 (exclusive), got {threshold}")
        self.method = method
        self.threshold = threshold
        self.seen = 0
        self.removed = 0
        self._hashes: set[int] = set()
        if method == "near":
            self.bands, self.rows = lsh_bands(threshold, NUM_PERM)
            self._band_keys: list[set[int]] = [set() for _ in range(self.bands)]
            rng = np.random.default_rng(_SEED)
            # multiply-shift hashing: an odd 64-bit multiplier and an addend per permutation
            self._a = rng.integers(0, 1 << 63, NUM_PERM, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
            self._b = rng.integers(0, 1 << 63, NUM_PERM, dtype=np.uint64)

    def is_duplicate(self, text: str) -> bool:
        """Whether the document ``text`` (any line breaks) duplicates one kept before; if not, it
        is remembered.  A document with no words is never a duplicate (it holds no tokens)."""
        norm = normalise(text)
        if not norm:
            return False
        self.seen += 1
        dup = self._exact(norm) if self.method == "exact" else self._near(norm)
        self.removed += dup
        return dup

    def _exact(self, norm: str) -> bool:
        key = int.from_bytes(hashlib.blake2b(norm.encode("utf-8"), digest_size=8).digest(), "little")
        if key in self._hashes:
            return True
        self._hashes.add(key)
        return False

    def _near(self, norm: str) -> bool:
        sig = self.signature(norm)
        # Python's hash of the band's bytes: 64 bits, salted per process, which is all one run compares
        keys = [hash(sig[i * self.rows:(i + 1) * self.rows].tobytes()) for i in range(self.bands)]
        if any(k in band for k, band in zip(keys, self._band_keys)):
            return True
        for k, band in zip(keys, self._band_keys):
            band.add(k)
        return False

    def signature(self, norm: str) -> np.ndarray:
        """uint64 [NUM_PERM]: the MinHash of the normalised text's word 5-grams (each value < 2**32)."""
        shingles = shingle_hashes(norm)
        sig = np.full(NUM_PERM, np.iinfo(np.uint64).max, dtype=np.uint64)
        for lo in range(0, len(shingles), SLICE):
            # [NUM_PERM, slice]: wrapping 64-bit products are intended (multiply-shift hashing)
            values = np.multiply.outer(self._a, shingles[lo:lo + SLICE])
            values += self._b[:, None]
            np.minimum(sig, values.min(axis=1), out=sig)
        # the high 32 bits are the permuted hash; the shift keeps order, so it may follow the minimum
        return sig >> np.uint64(32)

    def record(self) -> dict[str, Any]:
        """What ``meta.json`` notes: the method, its settings and what it removed."""
        out: dict[str, Any] = {"method": self.method}
        if self.method == "near":
            out.update(threshold=self.threshold, shingle_words=SHINGLE, num_perm=NUM_PERM, bands=self.bands,
                       rows=self.rows)
        out.update(documents_seen=self.seen, documents_removed=self.removed, share_removed=self.share)
        return out

    @property
    def share(self) -> float:
        return self.removed / self.seen if self.seen else 0.0

    def describe(self) -> str:
        how = "exact duplicates" if self.method == "exact" else f"near duplicates (MinHash LSH, threshold {self.threshold:g})"
        return f"--dedup {self.method}: removed {self.removed:,} of {self.seen:,} documents ({100 * self.share:.2f}%), {how}"


def shingle_hashes(norm: str) -> np.ndarray:
    """uint64 [max(1, n_words - 4)]: a 64-bit hash of each run of 5 words of ``norm`` (of all its
    words when it has fewer); ``norm`` must hold a word."""
    words = norm.split(" ")
    w = np.fromiter(map(zlib.crc32, map(str.encode, words)), dtype=np.uint64, count=len(words))
    n = max(1, len(w) - SHINGLE + 1)
    h = np.zeros(n, dtype=np.uint64)
    for k in range(min(SHINGLE, len(w))):
        # position-dependent odd multipliers: "a b" and "b a" hash apart
        h = h * np.uint64(0x100000001B3) + w[k:k + n] + np.uint64(k + 1)
    return _mix64(h)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise (wrapping uint64 arithmetic): spreads every input bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@functools.lru_cache(maxsize=None)
def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(b, r)`` with ``b * r <= num_perm`` minimising the false-positive area below ``threshold``
    plus the false-negative area above it (the probability a pair of similarity s shares a band is
    ``1 - (1 - s**r)**b``)."""
    below, above = np.linspace(0.0, threshold, 1001), np.linspace(threshold, 1.0, 1001)  # trapezoid rule
    best, best_err = (1, 1), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = float(np.trapezoid(1 - (1 - below ** r) ** b, below))
            fn = float(np.trapezoid((1 - above ** r) ** b, above))
            if 0.5 * fp + 0.5 * fn < best_err:
                best, best_err = (b, r), 0.5 * fp + 0.5 * fn
    return best


def unique_lines(lines: Iterable[str], dedup: Dedup, max_doc: int | None = None, where: str = "",
                 hint: str = "") -> Iterator[str]:
    """``lines`` without the documents ``dedup`` finds duplicated: each kept document's lines, then
    a blank line.  A document is held whole while it is compared; with ``max_doc`` one of more
    characters than that is a :class:`PtmError` (``where`` names the file, ``hint`` the way out)."""
    doc: list[str] = []
    size = 0
    for line in lines:
        if line.strip():
            doc.append(line)
            size += len(line)
            if max_doc is not None and size > max_doc:
                raise PtmError(f"{where}: a document is longer than {max_doc:,} characters, the longest --dedup "
                               f"holds to compare{hint}")
            continue
        if doc:
            if not dedup.is_duplicate("".join(doc)):
                yield from doc
                yield "\n"
            doc, size = [], 0
    if doc and not dedup.is_duplicate("".join(doc)):
        yield from doc
        yield "\n"


__all__ = ["DEFAULT_THRESHOLD", "METHODS", "Dedup", "lsh_bands", "normalise", "shingle_hashes",
           "unique_lines"]
