"""word2vec with one set of output rows shared across a window: negative sampling with shared
negatives (Ji et al. 2016), and Skip-gram hierarchical softmax with the shared Huffman path.

"Parallelizing Word2Vec in Shared and Distributed Memory" replaces word2vec.c's per-pair update
(each (input, output) pair draws its own K negatives and updates at once) by a small minibatch:
several input rows are scored against one set of output rows, the true word(s) plus K negatives
drawn once for the whole minibatch.  The level-1 updates become small dense products

    G = H · Oᵀ            [n, P+K]   scores of the n input rows against the output rows
    g = (label - σ(G))·α              (0 where a pair is not scored)
    dH = g · O            [n, D]     gradient w.r.t. the input rows, from the old outputs
    O += gᵀ · H           [P+K, D]   output update, from the old inputs

computed as tight loops over a block that stays in L1: the output rows are fetched once per
window instead of once per pair, and K negatives are drawn per window instead of per pair.

- Skip-gram: the inputs are the context words of one target's (reduced) window, ``n ≤ 2·window``
  rows of ``syn0``; the outputs are the target (P = 1, label 1 for every row) and K negatives.
- CBOW: one target has one input row (its context mean), so the minibatch spans targets: the
  inputs are the context means (or sums, ``cbow_mean=False``) of ``n ≤ cbow_batch`` consecutive
  targets of a sentence; the outputs are those n targets (P = n, row i's positive is column i
  only) and K negatives shared by the n rows.  The mean's gradient goes to each of the row's
  context words, as in the exact kernel.  Consecutive targets share most of their context, so
  their rows are alike and sharing negatives among them costs accuracy as ``cbow_batch`` grows
  (on 1M words of english-mix, analogy accuracy 4.6 % with per-target negatives, 4.1 % at 2,
  3.3 % at 4, 2.3 % at 10 targets per draw); Skip-gram's rows share only their target.

A negative equal to a row's true word is not scored for that row (word2vec.c skips it).  Within a
minibatch all reads happen before all writes, so repeated rows (a context word twice in a window,
a word that is the target of two CBOW rows, a negative drawn twice) receive the sum of their
gradients.  Between minibatches the updates are Hogwild as in the exact kernel; subsampling, the
reduced window, the learning-rate decay, the random stream and the sigmoid table are the exact
kernel's (:mod:`ptmkit.static.kernels.w2v`).

Skip-gram HS needs no approximation to share: word2vec.c already scores every context word of a
window against the same Huffman path (the centre word's), one context word after another.
``kernel="shared_path"`` scores them as one block ``[2·window, L]`` (:func:`hs_block`), so each
inner node's row is fetched once per window instead of once per context word; what changes is
only that the rows of one window read the node rows as they were before the window.

Shapes: ``syn0`` float32 [V, D] input vectors; ``syn1neg`` float32 [V, D] output vectors; ``syn1``
float32 [V-1, D] inner-node vectors; ``codes`` uint8 / ``points`` int32 [V, max code length] and
``lengths`` int32 [V]: the Huffman tree.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ptmkit.static.kernels.w2v import _EXP_SCALE, MAX_EXP, draw_negative, lcg, seed_state, subsample


@nb.njit(inline="always")
def ns_block(h, n, outs, n_pos, pos_of, n_out, syn1neg, g, dh, alpha, exp_tab):
    """One minibatch: input rows ``h[:n]`` [n, D] against output words ``outs[:n_out]``.

    Columns ``0..n_pos-1`` are true words: row i is scored against column ``pos_of[i]`` only
    (label 1).  Columns ``n_pos..n_out-1`` are negatives scored against every row (label 0), except
    against a row whose true word they equal.  Updates ``syn1neg`` rows in place (from the old
    ``h``) and writes the gradient w.r.t. ``h[:n]`` into ``dh[:n]`` (from the old output rows).
    ``g`` [≥n, ≥n_out] is scratch for the coefficients ``(label - σ(h·o))·alpha``.
    """
    dim = h.shape[1]
    # scores -> coefficients, before any row is written
    for i in range(n):
        pos = pos_of[i]
        true_word = outs[pos]
        for o in range(n_out):
            if o < n_pos:
                if o != pos:
                    g[i, o] = 0.0
                    continue
                label = 1.0
            else:
                if outs[o] == true_word:
                    g[i, o] = 0.0
                    continue
                label = 0.0
            row = syn1neg[outs[o]]
            f = np.float32(0.0)
            for k in range(dim):
                f += h[i, k] * row[k]
            if f > MAX_EXP:
                c = (label - 1.0) * alpha
            elif f < -MAX_EXP:
                c = label * alpha
            else:
                c = (label - exp_tab[int((f + MAX_EXP) * _EXP_SCALE)]) * alpha
            g[i, o] = np.float32(c)
    # dH = g · O (old output rows)
    for i in range(n):
        for k in range(dim):
            dh[i, k] = 0.0
        for o in range(n_out):
            c = g[i, o]
            if c == 0.0:
                continue
            row = syn1neg[outs[o]]
            for k in range(dim):
                dh[i, k] += c * row[k]
    # O += gᵀ · H (old input rows); a word in two columns gets both updates
    for o in range(n_out):
        row = syn1neg[outs[o]]
        for i in range(n):
            c = g[i, o]
            if c == 0.0:
                continue
            for k in range(dim):
                row[k] += c * h[i, k]


@nb.njit(inline="always")
def sg_window(syn0, syn1neg, buf, start, end, centre, negs, n_neg, alpha, exp_tab, ins, outs, pos_of, h, dh, g):
    """Skip-gram: the context words ``buf[start:end]`` (without ``centre``) predict ``buf[centre]``
    against the negatives ``negs[:n_neg]``; updates ``syn0`` and ``syn1neg``.  Returns the number of
    input rows.  ``ins`` [2W], ``outs`` [1+K], ``pos_of`` [2W], ``h``/``dh`` [2W, D], ``g`` [2W, 1+K]: scratch.
    """
    dim = syn0.shape[1]
    n = 0
    for j in range(start, end):
        if j == centre:
            continue
        w = buf[j]
        ins[n] = w
        pos_of[n] = 0
        for k in range(dim):
            h[n, k] = syn0[w, k]
        n += 1
    if n == 0:
        return 0
    outs[0] = buf[centre]
    for q in range(n_neg):
        outs[1 + q] = negs[q]
    ns_block(h, n, outs, 1, pos_of, 1 + n_neg, syn1neg, g, dh, alpha, exp_tab)
    for r in range(n):  # a word twice in the window gets both gradients
        w = ins[r]
        for k in range(dim):
            syn0[w, k] += dh[r, k]
    return n


@nb.njit(inline="always")
def cbow_batch(
    syn0, syn1neg, buf, centres, starts, ends, n_rows, negs, n_neg, alpha, cbow_mean, exp_tab, outs, pos_of, scale, h, dh, g
):  # fmt: skip
    """CBOW: target ``buf[centres[r]]`` is predicted from the mean (``cbow_mean``) or sum of the
    context words ``buf[starts[r]:ends[r]]`` without the centre, for ``r < n_rows``, all against the
    negatives ``negs[:n_neg]``; updates ``syn0`` and ``syn1neg``.  Targets without context words are
    skipped.  Returns the number of rows trained.  ``outs`` [2W+K], ``pos_of``/``scale`` [2W],
    ``h``/``dh`` [2W, D], ``g`` [2W, 2W+K]: scratch.
    """
    dim = syn0.shape[1]
    n = 0
    for r in range(n_rows):
        count = (ends[r] - starts[r]) - 1
        if count <= 0:
            continue
        centres[n], starts[n], ends[n] = centres[r], starts[r], ends[r]  # compact the rows kept
        for k in range(dim):
            h[n, k] = 0.0
        for j in range(starts[n], ends[n]):
            if j == centres[n]:
                continue
            w = buf[j]
            for k in range(dim):
                h[n, k] += syn0[w, k]
        inv = np.float32(1.0 / count)
        if cbow_mean:
            for k in range(dim):
                h[n, k] *= inv
            scale[n] = 1.0  # the mean's whole gradient to every context word (word2vec.c)
        else:
            scale[n] = inv  # a sum shares it (gensim's cbow_mean=0)
        outs[n] = buf[centres[n]]
        pos_of[n] = n
        n += 1
    if n == 0:
        return 0
    for q in range(n_neg):
        outs[n + q] = negs[q]
    ns_block(h, n, outs, n, pos_of, n + n_neg, syn1neg, g, dh, alpha, exp_tab)
    for r in range(n):
        s = scale[r]
        for j in range(starts[r], ends[r]):
            if j == centres[r]:
                continue
            w = buf[j]
            for k in range(dim):
                syn0[w, k] += s * dh[r, k]
    return n


@nb.njit(nogil=True, fastmath=True, cache=True)
def train_w2v_shared_chunk(
    syn0, syn1neg,
    ids, sentences, s0, s1,
    keep_prob, neg_table, exp_tab,
    sg, negative, window, cbow_mean, cbow_targets,
    alpha0, min_alpha, words_before, words_all,
    seed, epoch, chunk,
):  # fmt: skip
    """Train sentences ``s0..s1-1`` with shared negatives; returns the words kept by subsampling.

    Arguments, learning rate and random stream as :func:`ptmkit.static.kernels.w2v.train_w2v_chunk`.
    Skip-gram: per target, the reduced window is drawn, then K negatives for its context words.
    CBOW: consecutive targets of a sentence are taken ``cbow_targets`` (the config's ``cbow_batch``)
    at a time; per batch, each target's reduced window is drawn, then K negatives for the batch.
    """
    dim = syn0.shape[1]
    state = seed_state(seed, epoch, chunk)
    longest = 0
    for s in range(s0, s1):
        longest = max(longest, sentences[s + 1] - sentences[s])
    buf = np.empty(longest, dtype=np.int32)
    rows = max(2 * window, cbow_targets)
    cols = rows + negative
    h = np.empty((rows, dim), dtype=np.float32)
    dh = np.empty((rows, dim), dtype=np.float32)
    g = np.empty((rows, cols), dtype=np.float32)
    outs = np.empty(cols, dtype=np.int64)
    ins = np.empty(rows, dtype=np.int64)
    pos_of = np.empty(rows, dtype=np.int64)
    centres = np.empty(rows, dtype=np.int64)
    starts = np.empty(rows, dtype=np.int64)
    ends = np.empty(rows, dtype=np.int64)
    scale = np.empty(rows, dtype=np.float32)
    negs = np.empty(negative, dtype=np.int64)
    kept = 0
    for s in range(s0, s1):
        progress = (words_before + sentences[s]) / words_all
        alpha = max(min_alpha, alpha0 - (alpha0 - min_alpha) * progress)
        n, state = subsample(ids, sentences[s], sentences[s + 1], keep_prob, buf, state)
        kept += n
        if sg:
            for i in range(n):
                state = lcg(state)
                b = int(state % np.uint64(window))  # reduced window: effective size window - b
                start = max(0, i - window + b)
                end = min(n, i + window + 1 - b)
                if end - start <= 1:
                    continue
                for q in range(negative):
                    negs[q], state = draw_negative(state, neg_table[0], neg_table[1])
                sg_window(syn0, syn1neg, buf, start, end, i, negs, negative, alpha, exp_tab, ins, outs, pos_of, h, dh, g)
        else:
            for first in range(0, n, cbow_targets):
                n_rows = min(cbow_targets, n - first)
                for r in range(n_rows):
                    i = first + r
                    state = lcg(state)
                    b = int(state % np.uint64(window))
                    centres[r] = i
                    starts[r] = max(0, i - window + b)
                    ends[r] = min(n, i + window + 1 - b)
                for q in range(negative):
                    negs[q], state = draw_negative(state, neg_table[0], neg_table[1])
                cbow_batch(syn0, syn1neg, buf, centres, starts, ends, n_rows, negs, negative, alpha, cbow_mean,
                           exp_tab, outs, pos_of, scale, h, dh, g)  # fmt: skip
    return kept


# ----------------------------------------------------------------------------- hierarchical softmax


@nb.njit(inline="always")
def hs_block(h, n, target, syn1, codes, points, lengths, g, dh, alpha, exp_tab):
    """Skip-gram HS for one window: input rows ``h[:n]`` [n, D] against the L = ``lengths[target]``
    inner nodes on ``target``'s Huffman path (``syn1`` rows ``points[target, :L]``, label
    ``1 - codes[target, l]``).  Every row is scored against every node:

        G = H · Pᵀ [n, L];  g = (1 - code - σ(G))·α (0 where |G| ≥ MAX_EXP, as word2vec.c skips);
        dH = g · P (old nodes) into ``dh[:n]``;  P += gᵀ · H (old inputs), in place.

    word2vec.c runs the same n·L scores one context word at a time, each seeing the node rows the
    previous one updated; here the n rows of a window read the same node rows, fetched once.
    ``g`` [≥n, ≥L] is scratch.
    """
    dim = h.shape[1]
    n_nodes = lengths[target]
    for i in range(n):
        for l in range(n_nodes):
            row = syn1[points[target, l]]
            f = np.float32(0.0)
            for k in range(dim):
                f += h[i, k] * row[k]
            if f <= -MAX_EXP or f >= MAX_EXP:
                g[i, l] = 0.0
            else:
                g[i, l] = np.float32((1.0 - codes[target, l] - exp_tab[int((f + MAX_EXP) * _EXP_SCALE)]) * alpha)
    for i in range(n):
        for k in range(dim):
            dh[i, k] = 0.0
        for l in range(n_nodes):
            c = g[i, l]
            if c == 0.0:
                continue
            row = syn1[points[target, l]]
            for k in range(dim):
                dh[i, k] += c * row[k]
    for l in range(n_nodes):
        row = syn1[points[target, l]]
        for i in range(n):
            c = g[i, l]
            if c == 0.0:
                continue
            for k in range(dim):
                row[k] += c * h[i, k]


@nb.njit(inline="always")
def sg_hs_window(syn0, syn1, codes, points, lengths, buf, start, end, centre, alpha, exp_tab, ins, h, dh, g):
    """Skip-gram HS: the context words ``buf[start:end]`` (without ``centre``) predict ``buf[centre]``
    along its Huffman path; updates ``syn0`` and ``syn1``.  Returns the number of input rows.
    ``ins`` [2W], ``h``/``dh`` [2W, D], ``g`` [2W, max code length]: scratch.
    """
    dim = syn0.shape[1]
    n = 0
    for j in range(start, end):
        if j == centre:
            continue
        w = buf[j]
        ins[n] = w
        for k in range(dim):
            h[n, k] = syn0[w, k]
        n += 1
    if n == 0:
        return 0
    hs_block(h, n, buf[centre], syn1, codes, points, lengths, g, dh, alpha, exp_tab)
    for r in range(n):  # a word twice in the window gets both gradients
        w = ins[r]
        for k in range(dim):
            syn0[w, k] += dh[r, k]
    return n


@nb.njit(nogil=True, fastmath=True, cache=True)
def train_sg_hs_shared_chunk(
    syn0, syn1, codes, points, lengths,
    ids, sentences, s0, s1,
    keep_prob, exp_tab, window,
    alpha0, min_alpha, words_before, words_all,
    seed, epoch, chunk,
):  # fmt: skip
    """Skip-gram HS with one shared path per window (``kernel="shared_path"``); returns the words
    kept by subsampling.  Arguments, learning rate, subsampling, reduced window and random stream
    as :func:`ptmkit.static.kernels.w2v.train_w2v_chunk` (HS draws no negatives, so the stream is
    the exact kernel's, draw for draw).
    """
    dim = syn0.shape[1]
    state = seed_state(seed, epoch, chunk)
    longest = 0
    for s in range(s0, s1):
        longest = max(longest, sentences[s + 1] - sentences[s])
    buf = np.empty(longest, dtype=np.int32)
    rows = 2 * window
    h = np.empty((rows, dim), dtype=np.float32)
    dh = np.empty((rows, dim), dtype=np.float32)
    g = np.empty((rows, max(1, points.shape[1])), dtype=np.float32)
    ins = np.empty(rows, dtype=np.int64)
    kept = 0
    for s in range(s0, s1):
        progress = (words_before + sentences[s]) / words_all
        alpha = max(min_alpha, alpha0 - (alpha0 - min_alpha) * progress)
        n, state = subsample(ids, sentences[s], sentences[s + 1], keep_prob, buf, state)
        kept += n
        for i in range(n):
            state = lcg(state)
            b = int(state % np.uint64(window))  # reduced window: effective size window - b
            start = max(0, i - window + b)
            end = min(n, i + window + 1 - b)
            if end - start > 1:
                sg_hs_window(syn0, syn1, codes, points, lengths, buf, start, end, i, alpha, exp_tab, ins, h, dh, g)
    return kept


__all__ = ["cbow_batch", "hs_block", "ns_block", "sg_hs_window", "sg_window", "train_sg_hs_shared_chunk",
           "train_w2v_shared_chunk"]
