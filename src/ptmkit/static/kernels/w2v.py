"""Compiled CPU kernels of word2vec (Mikolov et al. 2013), Hogwild over chunks of sentences.

One call trains one chunk (~10k words) without the GIL; worker threads pull chunks from a shared
queue (:func:`ptmkit.static.hogwild.run_epochs`), so a thread preempted on a busy machine does not
hold the others at a barrier.  Each chunk has its own random state (word2vec.c's linear
congruential generator, seeded from ``(seed, epoch, chunk)``) and its own scratch buffers, and
updates the shared matrices without locks (Hogwild, as the original tool).  Subsampling, the
reduced window and the learning-rate decay are computed inside the kernel.

Shapes: ``syn0`` float32 [V, D] input vectors; ``syn1`` float32 [V-1, D] inner nodes of the
Huffman tree (hierarchical softmax); ``syn1neg`` float32 [V, D] output vectors (negative sampling).
The sigmoid is read from word2vec's table over [-MAX_EXP, MAX_EXP]; beyond it negative sampling
takes the saturated gradient and hierarchical softmax skips the node, both as word2vec.c does.
Negatives come from an O(1) alias table (a binary search over the cumulative table, as gensim
does, made Skip-gram-NS ~2x slower).

The time goes to rows of ``syn0`` / ``syn1neg`` that miss the caches (two 22 MB matrices at 55k
words), so the kernel prefetches what it will need a little later (:mod:`ptmkit.static.kernels.prefetch`):
the input row entering the window, the next centre word's output row, and each negative's row,
drawn ``NEG_RING`` draws before it is used from a stream of its own (:func:`next_negative`).
On english-mix (one epoch, 2 threads, fresh processes alternating with the kernel without them)
this made Skip-gram NS 1.39x and CBOW NS 1.34x faster (medians of 4 seeds each).

Every update of hierarchical softmax writes the root of the Huffman tree and the nodes below it,
and most negatives are a few frequent words; threads writing those rows at once stall on
cache-line transfers (Skip-gram HS ran slower on 2 threads than on 1).  So with ``hot_nodes`` /
``hot_words`` > 0 each chunk trains its own copy of those rows (``hot``, ``snap`` [K, D]) and
adds its change into the shared matrix every ``sync_words`` kept words (:func:`hot_sync`):
Hogwild with the hottest rows merged late instead of contended.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ptmkit.static.kernels.prefetch import prefetch_row

EXP_TABLE_SIZE = 1000
MAX_EXP = 6.0
_EXP_SCALE = EXP_TABLE_SIZE / MAX_EXP / 2.0

_LCG_MUL = np.uint64(25214903917)
_LCG_ADD = np.uint64(11)
_U16 = np.uint64(16)
_MASK24 = np.uint64(0xFFFFFF)
NEG_RING = 32  # pre-drawn negatives: about 6 Skip-gram pairs ahead at negative = 5


def exp_table() -> np.ndarray:
    """float32 [EXP_TABLE_SIZE + 1]: sigmoid(x) for x on a uniform grid over [-MAX_EXP, MAX_EXP].

    The last entry serves a score of exactly ``MAX_EXP``, which negative sampling looks up (it
    only skips scores strictly beyond the range) at index ``EXP_TABLE_SIZE``; word2vec.c allocates
    the same extra entry.  Without it that lookup read past the table: a few times per run on a
    large corpus, and now and then the value read there turned the vectors into NaN."""
    x = (np.arange(EXP_TABLE_SIZE + 1, dtype=np.float64) / EXP_TABLE_SIZE * 2.0 - 1.0) * MAX_EXP
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


@nb.njit(inline="always")
def lcg(state: np.uint64) -> np.uint64:
    return state * _LCG_MUL + _LCG_ADD


@nb.njit(inline="always")
def uniform(state: np.uint64) -> float:
    """A float in [0, 1) from bits 16..39 of the state (the low bits of an LCG are weak)."""
    return float((state >> _U16) & _MASK24) / 16777216.0


@nb.njit(inline="always")
def seed_state(seed: int, epoch: int, chunk: int) -> np.uint64:
    """SplitMix64 of (seed, epoch, chunk): independent streams per chunk and epoch."""
    x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(epoch) * np.uint64(0xD1B54A32D192ED03)
    x = x + np.uint64(chunk) * np.uint64(0x8CB92BA72F3D8DD7) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(cache=True)
def alias_table(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table of ``probs`` (float64 [V], sums to 1): (accept float32 [V], alias int32 [V]).

    Drawing i uniformly, then keeping i with probability accept[i] (else alias[i]) samples ``probs``
    exactly in O(1): two reads of V-sized arrays instead of a binary search over the cumulative table.
    """
    v = probs.shape[0]
    scaled = probs * v
    accept = np.ones(v, dtype=np.float32)
    alias = np.arange(v).astype(np.int32)
    small = np.empty(v, dtype=np.int64)
    large = np.empty(v, dtype=np.int64)
    ns = nl = 0
    for i in range(v):
        if scaled[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        l = large[nl - 1]
        accept[s] = scaled[s]
        alias[s] = l
        scaled[l] = (scaled[l] + scaled[s]) - 1.0
        if scaled[l] < 1.0:
            nl -= 1
            small[ns] = l
            ns += 1
    return accept, alias


@nb.njit(inline="always")
def draw_negative(state: np.uint64, accept: np.ndarray, alias: np.ndarray):
    """One word from the alias table; -> (word, new state)."""
    state = lcg(state)
    i = np.int64((state >> np.uint64(24)) % np.uint64(accept.shape[0]))
    state = lcg(state)
    if uniform(state) >= accept[i]:
        i = np.int64(alias[i])
    return i, state


@nb.njit(inline="always")
def subsample(ids, a, b, keep_prob, buf, state):
    """Copy ids[a:b] into buf, dropping word w with probability 1 - keep_prob[w]; -> (n, state)."""
    n = 0
    for k in range(a, b):
        w = ids[k]
        p = keep_prob[w]
        if p < 1.0:
            state = lcg(state)
            if p < uniform(state):
                continue
        buf[n] = w
        n += 1
    return n, state


@nb.njit(inline="always")
def hs_update(l1, target, syn1, codes, points, lengths, work, alpha, exp_tab):
    """Hierarchical-softmax step: follow ``target``'s Huffman path; gradient into ``work``."""
    dim = l1.shape[0]
    for j in range(lengths[target]):
        row = syn1[points[target, j]]
        f = np.float32(0.0)
        for k in range(dim):
            f += l1[k] * row[k]
        if f <= -MAX_EXP or f >= MAX_EXP:
            continue
        g32 = np.float32((1.0 - codes[target, j] - exp_tab[int((f + MAX_EXP) * _EXP_SCALE)]) * alpha)
        for k in range(dim):
            r = row[k]
            work[k] += g32 * r
            row[k] = r + g32 * l1[k]


@nb.njit(inline="always")
def negative_ring(state, negative, neg_table):
    """-> (ring int64 [NEG_RING] of pre-drawn negatives, the state of their own stream).

    The negatives' stream starts from the chunk's state, moved to another point of the LCG's
    cycle, so the chunk's other draws (subsampling, window) are those of the chunk's own stream.
    """
    neg_state = lcg(state ^ np.uint64(0x5851F42D4C957F2D))
    ring = np.empty(NEG_RING if negative > 0 else 1, dtype=np.int64)
    if negative > 0:
        for r in range(NEG_RING):
            t, neg_state = draw_negative(neg_state, neg_table[0], neg_table[1])
            ring[r] = t
    return ring, neg_state


@nb.njit(inline="always")
def next_negative(ring, pos, neg_state, accept, alias, syn1neg, n_hot):
    """The negative drawn ``ring.shape[0]`` draws ago; a fresh draw takes its slot and its row
    of ``syn1neg`` is prefetched (unless it is one of the ``n_hot`` thread-private rows), so the
    row is in cache by the time it is used, a few pairs later.  -> (word, pos, neg_state)."""
    t = ring[pos]
    fresh, neg_state = draw_negative(neg_state, accept, alias)
    ring[pos] = fresh
    if fresh >= n_hot:
        prefetch_row(syn1neg.ctypes.data, fresh, syn1neg.shape[1] * syn1neg.itemsize)
    pos += 1
    if pos == ring.shape[0]:
        pos = 0
    return t, pos, neg_state


@nb.njit(inline="always")
def ns_update(l1, target, syn1neg, hot, work, negative, alpha, exp_tab, ring, pos, neg_state, neg_table):
    """Negative-sampling step for hidden vector ``l1`` [D], true word ``target`` and ``negative``
    words from the prefetching ring of :func:`next_negative` (``ring``, ``pos``, ``neg_state``).

    Updates the output rows in place, rows ``< hot.shape[0]`` (the most frequent words) in the
    thread's ``hot`` copy [K, D] and the others in ``syn1neg`` [V, D], and adds the gradient
    w.r.t. ``l1`` into ``work`` [D].  -> (pos, neg_state).
    """
    dim = l1.shape[0]
    n_hot = hot.shape[0]
    for d in range(negative + 1):
        if d == 0:
            t = np.int64(target)
            label = 1.0
        else:
            t, pos, neg_state = next_negative(ring, pos, neg_state, neg_table[0], neg_table[1], syn1neg, n_hot)
            if t == target:
                continue
            label = 0.0
        row = hot[t] if t < n_hot else syn1neg[t]
        f = np.float32(0.0)
        for k in range(dim):
            f += l1[k] * row[k]
        if f > MAX_EXP:
            g = (label - 1.0) * alpha
        elif f < -MAX_EXP:
            g = label * alpha
        else:
            g = (label - exp_tab[int((f + MAX_EXP) * _EXP_SCALE)]) * alpha
        g32 = np.float32(g)
        for k in range(dim):  # one pass: read the old row for the input gradient, then update it
            r = row[k]
            work[k] += g32 * r
            row[k] = r + g32 * l1[k]
    return pos, neg_state


@nb.njit(inline="always")
def hs_update_hot(l1, target, syn1, hot, hot_base, codes, points, lengths, work, alpha, exp_tab):
    """:func:`hs_update` reading and writing inner nodes ``>= hot_base`` in the thread's ``hot`` copy."""
    dim = l1.shape[0]
    for j in range(lengths[target]):
        p = points[target, j]
        row = hot[p - hot_base] if p >= hot_base else syn1[p]
        f = np.float32(0.0)
        for k in range(dim):
            f += l1[k] * row[k]
        if f <= -MAX_EXP or f >= MAX_EXP:
            continue
        g32 = np.float32((1.0 - codes[target, j] - exp_tab[int((f + MAX_EXP) * _EXP_SCALE)]) * alpha)
        for k in range(dim):
            r = row[k]
            work[k] += g32 * r
            row[k] = r + g32 * l1[k]


@nb.njit(inline="always")
def hot_sync(syn1, hot, snap, hot_base, push):
    """Merge the thread's private top-of-tree rows with the shared ones.

    ``push``: add this thread's change since the last sync (``hot - snap``) into ``syn1``; then
    ``hot`` and ``snap`` both take the shared rows, other threads' changes included.
    """
    for r in range(hot.shape[0]):
        shared = syn1[hot_base + r]
        own = hot[r]
        base = snap[r]
        for k in range(shared.shape[0]):
            v = shared[k] + (own[k] - base[k]) if push else shared[k]
            shared[k] = v
            own[k] = v
            base[k] = v


@nb.njit(nogil=True, fastmath=True, cache=True)
def train_w2v_chunk(
    syn0, syn1, syn1neg,
    ids, sentences, s0, s1,
    keep_prob, neg_table, codes, points, lengths, exp_tab,
    sg, hs, negative, window, cbow_mean,
    alpha0, min_alpha, words_before, words_all,
    seed, epoch, chunk, hot_nodes=0, hot_words=0, sync_words=1024,
):  # fmt: skip
    """Train sentences ``s0..s1-1`` (one chunk); returns the number of words kept by subsampling.

    Runs without the GIL, so several Python threads train different chunks at once (Hogwild).
    The learning rate falls linearly from ``alpha0`` to ``min_alpha`` over ``words_all`` words;
    a sentence starting at word offset o of this epoch uses progress (words_before + o) / words_all.
    The random stream is seeded from ``(seed, epoch, chunk)``: a chunk trains the same way whichever
    thread runs it and whenever.
    """
    dim = syn0.shape[1]
    state = seed_state(seed, epoch, chunk)
    longest = 0
    for s in range(s0, s1):
        longest = max(longest, sentences[s + 1] - sentences[s])
    buf = np.empty(longest, dtype=np.int32)
    work = np.empty(dim, dtype=np.float32)
    neu1 = np.empty(dim, dtype=np.float32)
    # Hierarchical softmax writes the root and the nodes below it for every word, so threads
    # sharing them stall on cache-line transfers (2 threads ran slower than 1).  With
    # ``hot_nodes`` > 0 each thread trains its own copy of the top inner nodes (the highest
    # indices: the last merges of the Huffman tree) and merges its change every ``sync_words``.
    hot_nodes = min(hot_nodes, syn1.shape[0]) if hs else 0
    hot_base = syn1.shape[0] - hot_nodes
    hot = np.empty((hot_nodes, dim), dtype=np.float32)
    snap = np.empty((hot_nodes, dim), dtype=np.float32)
    hot_sync(syn1, hot, snap, hot_base, False)
    n_hot_neg = min(hot_words, syn1neg.shape[0]) if negative > 0 else 0
    hot_neg = np.empty((n_hot_neg, dim), dtype=np.float32)
    snap_neg = np.empty((n_hot_neg, dim), dtype=np.float32)
    hot_sync(syn1neg, hot_neg, snap_neg, 0, False)
    ring, neg_state = negative_ring(state, negative, neg_table)
    pos = 0
    row_bytes = dim * syn0.itemsize
    p_syn0, p_syn1, p_syn1neg = syn0.ctypes.data, syn1.ctypes.data, syn1neg.ctypes.data
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
            b = int(state % np.uint64(window))  # reduced window: effective size window - b
            start = max(0, i - window + b)
            end = min(n, i + window + 1 - b)
            target = buf[i]
            if i + window + 1 < n:  # the input row that enters the window next
                prefetch_row(p_syn0, buf[i + window + 1], row_bytes)
            if negative > 0 and i + 1 < n and buf[i + 1] >= n_hot_neg:  # the next centre word's output row
                prefetch_row(p_syn1neg, buf[i + 1], row_bytes)
            if hs and i + 1 < n:  # the shared inner nodes on the next centre word's Huffman path
                nxt = buf[i + 1]
                for q in range(lengths[nxt]):
                    if points[nxt, q] < hot_base:
                        prefetch_row(p_syn1, points[nxt, q], row_bytes)
            if sg:
                for j in range(start, end):
                    if j == i:
                        continue
                    w_in = buf[j]  # the context word's vector predicts the centre word
                    for k in range(dim):
                        work[k] = 0.0
                    l1 = syn0[w_in]
                    if hs:
                        hs_update_hot(l1, target, syn1, hot, hot_base, codes, points, lengths, work, alpha, exp_tab)
                    if negative > 0:
                        pos, neg_state = ns_update(l1, target, syn1neg, hot_neg, work, negative, alpha, exp_tab,
                                                        ring, pos, neg_state, neg_table)
                    for k in range(dim):
                        l1[k] += work[k]
            else:
                for k in range(dim):
                    neu1[k] = 0.0
                count = 0
                for j in range(start, end):
                    if j == i:
                        continue
                    w = buf[j]
                    for k in range(dim):
                        neu1[k] += syn0[w, k]
                    count += 1
                if count == 0:
                    continue
                inv = np.float32(1.0 / count)
                if cbow_mean:
                    for k in range(dim):
                        neu1[k] *= inv
                for k in range(dim):
                    work[k] = 0.0
                if hs:
                    hs_update_hot(neu1, target, syn1, hot, hot_base, codes, points, lengths, work, alpha, exp_tab)
                if negative > 0:
                    pos, neg_state = ns_update(neu1, target, syn1neg, hot_neg, work, negative, alpha, exp_tab,
                                                    ring, pos, neg_state, neg_table)
                # the mean's gradient goes whole to every context word (word2vec.c, gensim); a sum
                # of inputs shares it among them (gensim's cbow_mean=0)
                if not cbow_mean:
                    for k in range(dim):
                        work[k] *= inv
                for j in range(start, end):
                    if j == i:
                        continue
                    w = buf[j]
                    for k in range(dim):
                        syn0[w, k] += work[k]
    hot_sync(syn1, hot, snap, hot_base, True)
    hot_sync(syn1neg, hot_neg, snap_neg, 0, True)
    return kept
