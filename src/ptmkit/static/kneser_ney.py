"""Interpolated modified Kneser-Ney trigram language model (Chen & Goodman 1998/1999).

Vocabulary: ``V`` predictable symbols (words, ``<unk>``, ``</s>``) plus the context-only
``<s>`` with id ``V``.  Each sentence ``w_1..w_n`` is scored as ``<s> <s> w_1 .. w_n </s>``:
``n + 1`` predictions.

Probabilities (``c`` = count, ``N1+(. v w)`` = number of distinct ``u`` before ``v w``)::

    P3(w|u v) = max(c(u v w) - D3(c), 0) / c(u v .) + g3(u v) P2(w|v)
    P2(w|v)   = max(N1+(. v w) - D2(N), 0) / N1+(. v .) + g2(v) P1(w)
    P1(w)     = max(N1+(. w) - D1(N), 0) / N1+(. .) + g1 / V
    g(h)      = (D(1) n1(h) + D(2) n2(h) + D(3+) n3+(h)) / total(h)

where ``n_k(h)`` is the number of words seen exactly ``k`` times (``3+``: at least 3) after
``h`` at that order; a context never seen backs off entirely (``g = 1``).  The discounts of
each order come from that order's count-of-counts ``N_k`` (of the counts the order uses):
``Y = N1/(N1 + 2 N2)``, ``D(1) = 1 - 2Y N2/N1``, ``D(2) = 2 - 3Y N3/N2``, ``D(3+) = 3 - 4Y N4/N3``.

All counting is ``np.unique`` over n-grams packed into int64 keys; scoring is vectorised with
``np.searchsorted`` over the sorted keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ptmkit.errors import PtmError


def modified_kn_discounts(counts: np.ndarray) -> np.ndarray:
    """float64 [4]: ``(0, D1, D2, D3+)`` from the counts of one order (Chen & Goodman, eq. 26).

    A count-of-counts that is zero (tiny corpora) gives the discount of the nearest defined
    formula, clipped to ``[0, k]``.
    """
    n = np.array([np.count_nonzero(counts == k) for k in (1, 2, 3, 4)], dtype=np.float64)
    if n[0] == 0:
        return np.zeros(4)
    y = n[0] / (n[0] + 2 * n[1])
    d = np.zeros(4)
    for k in (1, 2, 3):
        nk, nk1 = n[k - 1], n[k]
        d[k] = k - (k + 1) * y * nk1 / nk if nk > 0 else d[k - 1]
        d[k] = min(max(d[k], 0.0), float(k))
    return d


def pad_sentences(ids: np.ndarray, offsets: np.ndarray, bos: int, eos: int, n_bos: int) -> tuple[np.ndarray, np.ndarray]:
    """Insert ``n_bos`` × ``bos`` before and one ``eos`` after every sentence.

    ids: int [N]; offsets: int64 [S+1].  Returns ``(padded int64 [N + S (n_bos+1)],
    targets int64 [N + S])``: the positions in ``padded`` of every predicted symbol (words and
    ``eos``), each preceded by at least ``n_bos`` symbols of its own sentence or padding.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    lens = np.diff(offsets)
    S = lens.shape[0]
    plen = lens + n_bos + 1
    pstart = np.concatenate([[0], np.cumsum(plen)[:-1]])
    padded = np.full(int(plen.sum()), bos, dtype=np.int64)
    # word k of sentence s goes to pstart[s] + n_bos + k
    word_pos = np.repeat(pstart + n_bos - offsets[:-1], lens) + np.arange(ids.shape[0])
    padded[word_pos] = ids
    padded[pstart + plen - 1] = eos
    pred_lens = lens + 1
    targets = np.repeat(pstart + n_bos - np.concatenate([[0], np.cumsum(pred_lens)[:-1]]), pred_lens) + np.arange(
        int(pred_lens.sum())
    )
    assert S == 0 or targets[-1] == padded.shape[0] - 1
    return padded, targets


def _group_sum(keys: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unique keys (sorted) and the number (or the weight sum) of their occurrences."""
    uniq, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
    if weights is None:
        return uniq, cnt.astype(np.float64)
    return uniq, np.bincount(inv, weights=weights, minlength=uniq.shape[0])


def _lookup(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray, default: float = 0.0) -> np.ndarray:
    """values[k] where sorted_keys[k] == query, else ``default`` (vectorised)."""
    if sorted_keys.shape[0] == 0:
        return np.full(query.shape, default, dtype=np.float64)
    pos = np.minimum(np.searchsorted(sorted_keys, query), sorted_keys.shape[0] - 1)
    hit = sorted_keys[pos] == query
    return np.where(hit, values[pos], default)


@dataclass
class _Level:
    """One order: its n-gram types, their (continuation) counts and per-context statistics."""

    keys: np.ndarray  # int64 sorted n-gram keys
    counts: np.ndarray  # float64 counts used at this order
    ctx_keys: np.ndarray  # int64 sorted context keys
    ctx_total: np.ndarray  # float64 total count per context
    ctx_gamma_num: np.ndarray  # float64 D1 n1 + D2 n2 + D3 n3+ per context
    discounts: np.ndarray  # float64 [4]


def _level(keys: np.ndarray, counts: np.ndarray, ctx_of: np.ndarray) -> _Level:
    d = modified_kn_discounts(counts)
    disc = d[np.minimum(counts, 3).astype(np.int64)]
    ctx_keys, inv = np.unique(ctx_of, return_inverse=True)
    total = np.bincount(inv, weights=counts, minlength=ctx_keys.shape[0])
    gamma_num = np.bincount(inv, weights=disc, minlength=ctx_keys.shape[0])
    return _Level(keys, counts, ctx_keys, total, gamma_num, d)


class KneserNeyTrigram:
    """Interpolated modified Kneser-Ney trigram model over ``vocab_size`` predictable symbols.

    Symbol ids: ``0..V-1`` predictable (the caller maps unknown words to an ``<unk>`` id and
    reserves an ``</s>`` id), ``V`` = ``<s>`` (context only).
    """

    def __init__(self, vocab_size: int, eos: int):
        if not 0 <= eos < vocab_size:
            raise PtmError(f"eos id {eos} must be a predictable symbol in [0, {vocab_size})")
        self.V = int(vocab_size)
        self.eos = int(eos)
        self.bos = self.V
        self.B = self.V + 1  # radix of the packed keys
        self.fitted = False

    # ------------------------------------------------------------------ training
    def fit(self, ids: np.ndarray, offsets: np.ndarray) -> "KneserNeyTrigram":
        """Count the trigrams of sentences ``ids[offsets[s]:offsets[s+1]]`` (int ids in [0, V))."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.V):
            raise PtmError(f"word ids must lie in [0, {self.V}); map unknown words to <unk> first")
        padded, tgt = pad_sentences(ids, offsets, self.bos, self.eos, 2)
        if tgt.shape[0] == 0:
            raise PtmError("cannot fit a language model on an empty corpus")
        B = self.B
        tri = (padded[tgt - 2] * B + padded[tgt - 1]) * B + padded[tgt]
        k3, c3 = _group_sum(tri)
        self.l3 = _level(k3, c3, k3 // B)
        # continuation counts: distinct u per (v, w) = number of trigram types ending in (v, w)
        k2, c2 = _group_sum(k3 % (B * B))
        self.l2 = _level(k2, c2, k2 // B)
        # distinct v per w
        k1, c1 = _group_sum(k2 % B)
        self.l1 = _level(k1, c1, np.zeros_like(k1))
        self.fitted = True
        return self

    # ------------------------------------------------------------------ scoring
    def _p1(self, w: np.ndarray) -> np.ndarray:
        l1 = self.l1
        c = _lookup(l1.keys, l1.counts, w)
        total = l1.ctx_total[0]
        disc = l1.discounts[np.minimum(c, 3).astype(np.int64)]
        return np.maximum(c - disc, 0.0) / total + l1.ctx_gamma_num[0] / total / self.V

    @staticmethod
    def _interp(level: _Level, key: np.ndarray, ctx: np.ndarray, lower: np.ndarray) -> np.ndarray:
        c = _lookup(level.keys, level.counts, key)
        total = _lookup(level.ctx_keys, level.ctx_total, ctx)
        gnum = _lookup(level.ctx_keys, level.ctx_gamma_num, ctx)
        seen = total > 0
        safe = np.where(seen, total, 1.0)
        disc = level.discounts[np.minimum(c, 3).astype(np.int64)]
        p = np.maximum(c - disc, 0.0) / safe + gnum / safe * lower
        return np.where(seen, p, lower)

    def prob(self, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> np.ndarray:
        """P(w | u v) for arrays of ids (u, v may be ``<s>``); float64, same shape."""
        if not self.fitted:
            raise PtmError("the Kneser-Ney model is not fitted")
        u, v, w = (np.asarray(a, dtype=np.int64) for a in (u, v, w))
        B = self.B
        p1 = self._p1(w)
        p2 = self._interp(self.l2, v * B + w, v, p1)
        return self._interp(self.l3, (u * B + v) * B + w, u * B + v, p2)

    def sentence_log_probs(self, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Natural-log probabilities of every predicted symbol (words and ``</s>``), float64 [N + S]."""
        padded, tgt = pad_sentences(np.asarray(ids, dtype=np.int64), offsets, self.bos, self.eos, 2)
        return np.log(self.prob(padded[tgt - 2], padded[tgt - 1], padded[tgt]))

    def perplexity(self, ids: np.ndarray, offsets: np.ndarray) -> float:
        """exp(mean negative log-probability) over the words and ``</s>`` symbols."""
        lp = self.sentence_log_probs(ids, offsets)
        return math.exp(-float(lp.mean()))
