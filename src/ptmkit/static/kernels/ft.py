"""Compiled kernels of fastText (Bojanowski et al. 2017): subword hashing and Hogwild training.

A word's input representation is the mean of the rows of ``emb`` listed for it in a CSR table
(``sub_ptr`` int64 [V+1], ``sub_idx`` int32): its own row (``< V``) and the rows ``V + h % bucket``
of its character n-grams, with h the 32-bit FNV-1a hash fastText uses.  Skip-gram: the centre word's
representation predicts each context word (negative sampling on ``syn1neg`` [V, D]); CBOW: the mean
over all rows of the context words predicts the centre word.  The gradient w.r.t. that mean is added
to every row, as fastText does.  In Skip-gram the input gradient of one centre word is accumulated over
its window and applied once (the centre's representation is computed once per window, not per pair).

The output layer is negative sampling (``syn1neg`` [V, D]) or hierarchical softmax (``syn1`` [V-1, D]
over the Huffman tree of the word counts), with the very update steps of the word2vec kernel
(:func:`ptmkit.static.kernels.w2v.ns_update`, :func:`ptmkit.static.kernels.w2v.hs_update`) applied to the subword mean.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ptmkit.static.kernels.prefetch import prefetch_row
from ptmkit.static.kernels.w2v import hot_sync, hs_update_hot, lcg, negative_ring, ns_update, seed_state, subsample

_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_MASK32 = np.uint64(0xFFFFFFFF)


@nb.njit(cache=True)
def fnv1a(buf: np.ndarray, start: int, end: int) -> np.uint64:
    """fastText's hash of ``buf[start:end]`` (UTF-8 bytes), bytes sign-extended as C ``int8_t``."""
    h = _FNV_OFFSET
    for k in range(start, end):
        b = np.uint64(buf[k])
        if b >= np.uint64(128):
            b = b | np.uint64(0xFFFFFF00)  # int8_t(c) -> uint32_t keeps the sign bits
        h = ((h ^ b) * _FNV_PRIME) & _MASK32
    return h


@nb.njit(cache=True)
def _ngram_rows(buf, start, end, minn, maxn, bucket, offset, out, n):
    """Append rows ``offset + hash % bucket`` of the n-grams (minn..maxn characters) of buf[start:end]."""
    for i in range(start, end):
        if (buf[i] & 0xC0) == 0x80:  # a UTF-8 continuation byte does not start a character
            continue
        j = i
        chars = 1
        while j < end and chars <= maxn:
            j += 1
            while j < end and (buf[j] & 0xC0) == 0x80:
                j += 1
            if chars >= minn and not (chars == 1 and (i == start or j == end)):
                if out.shape[0] > 0:
                    out[n] = offset + np.int64(fnv1a(buf, i, j) % np.uint64(bucket))
                n += 1
            chars += 1
    return n


@nb.njit(cache=True)
def subword_csr(buf, starts, with_word, minn, maxn, bucket, n_words):
    """CSR (ptr int64 [W+1], idx int32) of rows per word; word w's bytes are buf[starts[w]:starts[w+1]].

    ``with_word``: list the word's own row ``w`` first (vocabulary words); n-gram rows start at ``n_words``.
    """
    w_count = starts.shape[0] - 1
    ptr = np.zeros(w_count + 1, dtype=np.int64)
    empty = np.empty(0, dtype=np.int32)
    for w in range(w_count):
        n = 1 if with_word else 0
        if maxn >= minn and bucket > 0:
            n = _ngram_rows(buf, starts[w], starts[w + 1], minn, maxn, bucket, n_words, empty, n)
        ptr[w + 1] = ptr[w] + n
    idx = np.empty(ptr[-1], dtype=np.int32)
    for w in range(w_count):
        n = 0
        view = idx[ptr[w] : ptr[w + 1]]
        if with_word:
            view[0] = w
            n = 1
        if maxn >= minn and bucket > 0:
            _ngram_rows(buf, starts[w], starts[w + 1], minn, maxn, bucket, n_words, view, n)
    return ptr, idx


@nb.njit(parallel=True, cache=True)
def mean_rows(emb, ptr, idx):
    """float32 [W, D]: mean of ``emb`` rows ``idx[ptr[w]:ptr[w+1]]`` for each word (zeros if none)."""
    w_count = ptr.shape[0] - 1
    dim = emb.shape[1]
    out = np.zeros((w_count, dim), dtype=np.float32)
    for w in nb.prange(w_count):
        n = ptr[w + 1] - ptr[w]
        if n == 0:
            continue
        for r in range(ptr[w], ptr[w + 1]):
            for k in range(dim):
                out[w, k] += emb[idx[r], k]
        inv = np.float32(1.0 / n)
        for k in range(dim):
            out[w, k] *= inv
    return out


@nb.njit(inline="always")
def _add_rows_mean(emb, ptr, idx, w, hidden):
    for r in range(ptr[w], ptr[w + 1]):
        row = idx[r]
        for k in range(hidden.shape[0]):
            hidden[k] += emb[row, k]
    return ptr[w + 1] - ptr[w]


@nb.njit(inline="always")
def _apply_rows(emb, ptr, idx, w, work):
    for r in range(ptr[w], ptr[w + 1]):
        row = idx[r]
        for k in range(work.shape[0]):
            emb[row, k] += work[k]


@nb.njit(inline="always")
def _prefetch_rows(base, ptr, idx, w, row_bytes):
    """Prefetch the rows of word ``w``'s subwords (random buckets of a large matrix)."""
    for r in range(ptr[w], ptr[w + 1]):
        prefetch_row(base, idx[r], row_bytes)


@nb.njit(nogil=True, fastmath=True, cache=True)
def train_ft_chunk(
    emb, syn1neg, syn1, sub_ptr, sub_idx,
    ids, sentences, s0, s1,
    keep_prob, neg_table, codes, points, lengths, exp_tab,
    sg, hs, negative, window,
    alpha0, min_alpha, words_before, words_all,
    seed, epoch, chunk, hot_nodes=0, hot_words=0, sync_words=1024,
):  # fmt: skip
    """Train sentences ``s0..s1-1``; arguments and result as :func:`ptmkit.static.kernels.w2v.train_w2v_chunk`.

    ``hs``: hierarchical softmax on ``syn1`` with the tree ``codes``/``points``/``lengths``; else
    ``negative`` samples on ``syn1neg``.  ``hot_nodes`` / ``hot_words``: thread-private copies of
    the top inner nodes / the most frequent words' output rows, merged every ``sync_words`` kept
    words, as in :func:`ptmkit.static.kernels.w2v.train_w2v_chunk`.
    """
    dim = emb.shape[1]
    state = seed_state(seed, epoch, chunk)
    longest = 0
    for s in range(s0, s1):
        longest = max(longest, sentences[s + 1] - sentences[s])
    buf = np.empty(longest, dtype=np.int32)
    work = np.empty(dim, dtype=np.float32)
    hidden = np.empty(dim, dtype=np.float32)
    hot_nodes = min(hot_nodes, syn1.shape[0]) if hs else 0
    hot_base = syn1.shape[0] - hot_nodes
    hot = np.empty((hot_nodes, dim), dtype=np.float32)
    snap = np.empty((hot_nodes, dim), dtype=np.float32)
    hot_sync(syn1, hot, snap, hot_base, False)
    n_hot_neg = 0 if hs else min(hot_words, syn1neg.shape[0])
    hot_neg = np.empty((n_hot_neg, dim), dtype=np.float32)
    snap_neg = np.empty((n_hot_neg, dim), dtype=np.float32)
    hot_sync(syn1neg, hot_neg, snap_neg, 0, False)
    ring, neg_state = negative_ring(state, 0 if hs else negative, neg_table)
    pos = 0
    p_emb, row_bytes = emb.ctypes.data, dim * emb.itemsize
    since_sync = 0
    kept = 0
    for s in range(s0, s1):
        if since_sync >= sync_words:
            hot_sync(syn1, hot, snap, hot_base, True)
            hot_sync(syn1neg, hot_neg, snap_neg, 0, True)
            since_sync = 0
        progress = (words_before + sentences[s]) / words_all
        alpha = max(min_alpha, alpha0 - (alpha0 - min_alpha) * progress)
        n, state = subsample(ids, sentences[s], sentences[s + 1], keep_prob, buf, state)
        kept += n
        since_sync += n
        for i in range(n):
            state = lcg(state)
            b = int(state % np.uint64(window))
            start = max(0, i - window + b)
            end = min(n, i + window + 1 - b)
            # the subword rows needed next: the next centre word's (Skip-gram), or those of the
            # word entering the window (CBOW)
            ahead = i + 1 if sg else i + window + 1
            if ahead < n:
                _prefetch_rows(p_emb, sub_ptr, sub_idx, buf[ahead], row_bytes)
            for k in range(dim):
                hidden[k] = 0.0
                work[k] = 0.0
            if sg:
                w = buf[i]
                rows = _add_rows_mean(emb, sub_ptr, sub_idx, w, hidden)
                inv = np.float32(1.0 / rows)
                for k in range(dim):
                    hidden[k] *= inv
                for j in range(start, end):
                    if j == i:
                        continue
                    if hs:
                        hs_update_hot(hidden, buf[j], syn1, hot, hot_base, codes, points, lengths, work, alpha, exp_tab)
                    else:
                        pos, neg_state = ns_update(hidden, buf[j], syn1neg, hot_neg, work, negative, alpha, exp_tab,
                                                        ring, pos, neg_state, neg_table)
                _apply_rows(emb, sub_ptr, sub_idx, w, work)
            else:
                rows = 0
                for j in range(start, end):
                    if j != i:
                        rows += _add_rows_mean(emb, sub_ptr, sub_idx, buf[j], hidden)
                if rows == 0:
                    continue
                inv = np.float32(1.0 / rows)
                for k in range(dim):
                    hidden[k] *= inv
                if hs:
                    hs_update_hot(hidden, buf[i], syn1, hot, hot_base, codes, points, lengths, work, alpha, exp_tab)
                else:
                    pos, neg_state = ns_update(hidden, buf[i], syn1neg, hot_neg, work, negative, alpha, exp_tab,
                                                    ring, pos, neg_state, neg_table)
                for j in range(start, end):
                    if j != i:
                        _apply_rows(emb, sub_ptr, sub_idx, buf[j], work)
    hot_sync(syn1, hot, snap, hot_base, True)
    hot_sync(syn1neg, hot_neg, snap_neg, 0, True)
    return kept
