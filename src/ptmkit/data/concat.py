"""A read-only 1-D array that is the concatenation of several (memory-mapped) parts.

The token ids and word-start bits of a sharded corpus (:meth:`ptmkit.data.corpus.Corpus.open` of a
sharded set) are one of these over the shards' own files: indexing reads only the parts and
pages it touches, so a batch gathers ``tokens[src]`` across shard boundaries without loading the
corpus.  It answers what the objectives ask of ``corpus.tokens``: ``len``, ``shape``, ``dtype``, an
int, a slice, an integer array of any shape (``src [B, T]``) or a boolean mask of the whole
length; ``np.asarray`` reads every part into one array (a copy the size of the corpus, as an
objective that counts all tokens needs).

A part may be a :class:`LazyPart`: its file is memory-mapped when it is first read and unmapped
again when more than :data:`MAX_OPEN` parts are open (every memory map holds a file descriptor,
and a set of thousands of shards would run out of them).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

MAX_OPEN = 64  # memory maps of lazy parts kept open at once (least recently used unmapped first)


class _OpenParts:
    """The open arrays of lazy parts, least recently used first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.arrays: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def get(self, part: "LazyPart") -> Any:
        key = id(part)
        if key in self.arrays:
            self.arrays.move_to_end(key)
            return self.arrays[key]
        array = part.open()
        self.arrays[key] = array
        while len(self.arrays) > self.limit:
            self.arrays.popitem(last=False)
        return array


class LazyPart:
    """``n`` elements of ``dtype`` that ``open()`` memory-maps when they are first read."""

    def __init__(self, n: int, dtype: Any, open: Callable[[], Any], cache: _OpenParts) -> None:
        self.n, self.dtype, self.open, self.cache = int(n), np.dtype(dtype), open, cache

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        return self.cache.get(self)[index]


class ConcatArray:
    """``parts`` (ndarrays, memory maps, :class:`LazyPart` or anything indexable the same way
    with a ``dtype``, such as :class:`~ptmkit.data.corpus.PackedBits`) read as one array of
    ``sum(len(p))`` elements."""

    def __init__(self, parts: Sequence[Any]) -> None:
        if not parts:
            raise ValueError("no parts to concatenate")
        self.parts = list(parts)
        lengths = np.array([len(p) for p in self.parts], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # [n_parts + 1]
        self.n = int(self.starts[-1])
        dtypes = {np.dtype(p.dtype) for p in self.parts}
        if len(dtypes) > 1:
            raise ValueError(f"parts of different dtypes: {sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop()

    @classmethod
    def lazy(cls, lengths: Sequence[int], dtype: Any, open_part: Callable[[int], Any],
             max_open: int | None = None) -> "ConcatArray":
        """Parts ``0..len(lengths)-1`` of ``lengths[k]`` elements that ``open_part(k)`` maps on demand
        (at most ``max_open`` at once, default :data:`MAX_OPEN`)."""
        cache = _OpenParts(max_open or MAX_OPEN)
        return cls([LazyPart(n, dtype, (lambda k=k: open_part(k)), cache) for k, n in enumerate(lengths)])

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._slice(*index.indices(self.n))
        if isinstance(index, (int, np.integer)):
            i = int(index) + (self.n if index < 0 else 0)
            if not 0 <= i < self.n:
                raise IndexError(f"index {int(index)} out of range for {self.n} elements")
            k = int(np.searchsorted(self.starts, i, side="right")) - 1
            return self.parts[k][i - int(self.starts[k])]
        idx = np.asarray(index)
        if idx.dtype == bool:
            if idx.shape != (self.n,):
                raise IndexError(f"boolean index of shape {idx.shape} for {self.n} elements")
            return self._gather(np.flatnonzero(idx))
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be integers, slices or a boolean mask, got {idx.dtype}")
        return self._gather(idx.astype(np.int64))

    def _slice(self, start: int, stop: int, step: int) -> np.ndarray:
        if step != 1:
            return self._gather(np.arange(start, stop, step, dtype=np.int64))
        stop = max(stop, start)
        out = np.empty(stop - start, dtype=self.dtype)  # filled part by part: no view keeps a map open
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        for k in range(max(first, 0), len(self.parts)):
            a, b = int(self.starts[k]), int(self.starts[k + 1])
            if a >= stop:
                break
            lo, hi = max(start, a), min(stop, b)
            if lo < hi:
                out[lo - start : hi - start] = self.parts[k][lo - a : hi - a]
        return out

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """Elements at ``idx`` (any shape, negative from the end), part by part."""
        if idx.size and (int(idx.max()) >= self.n or int(idx.min()) < -self.n):
            raise IndexError(f"index out of range for {self.n} elements")
        idx = np.where(idx < 0, idx + self.n, idx)
        if len(self.parts) == 1:
            return np.asarray(self.parts[0][idx]).astype(self.dtype, copy=False)
        flat = idx.reshape(-1)
        which = np.searchsorted(self.starts, flat, side="right") - 1
        order = np.argsort(which, kind="stable")  # the indices grouped by part
        ks, firsts = np.unique(which[order], return_index=True)
        bounds = np.append(firsts, flat.size)
        out = np.empty(flat.size, dtype=self.dtype)
        for k, a, b in zip(ks.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
            sel = order[a:b]
            out[sel] = np.asarray(self.parts[k][flat[sel] - self.starts[k]])
        return out.reshape(idx.shape)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"ConcatArray({self.n} elements of {self.dtype} in {len(self.parts)} parts)"


__all__ = ["MAX_OPEN", "ConcatArray", "LazyPart"]
