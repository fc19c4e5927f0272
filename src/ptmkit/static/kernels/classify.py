"""Compiled kernels of fastText's supervised classifier (Joulin et al. 2016).

A line is the list of its input rows (``row_ptr`` int64 [N+1], ``row_idx`` int32): the ids of its
in-vocabulary words (< V) and, for word n-grams (n = 2..``word_ngrams``), the rows
``V + h % bucket`` with h fastText's hash of the n-gram.  The hidden vector is the mean of the
rows' embeddings (``emb`` float32 [V + bucket, D]); the output is a softmax over the labels
(``wo`` float32 [L, D]) or a hierarchical softmax over the Huffman tree of the label counts
(``wo`` [L-1, D], the update step of :func:`ptmkit.static.kernels.w2v.hs_update`).  As in fastText, the gradient
w.r.t. the hidden vector is divided by the number of rows and added to each of them.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ptmkit.static.kernels.ft import fnv1a
from ptmkit.static.kernels.w2v import hs_update, lcg, seed_state

_NGRAM_MUL = np.uint64(116049371)  # fastText's multiplier for chaining word hashes into n-grams


@nb.njit(cache=True)
def word_hashes_utf8(buf, starts):
    """uint64 [W]: fastText's hash of each word ``buf[starts[w]:starts[w+1]]``, sign-extended from int32."""
    n = starts.shape[0] - 1
    out = np.empty(n, dtype=np.uint64)
    for w in range(n):
        h = fnv1a(buf, starts[w], starts[w + 1])
        if h >= np.uint64(0x80000000):
            h = h | np.uint64(0xFFFFFFFF00000000)
        out[w] = h
    return out


@nb.njit(cache=True)
def input_rows(tok_word, tok_hash, line_ptr, n_words, bucket, word_ngrams):
    """CSR (ptr int64 [N+1], idx int32) of the input rows of each line.

    tok_word: int32 [T] word id or -1 (out of vocabulary: no row of its own, but its hash still
    enters the n-grams, as fastText does); tok_hash: uint64 [T] the word's 32-bit hash sign-extended
    to 64 bits (fastText keeps word hashes as int32 and chains them in uint64 arithmetic);
    line_ptr: int64 [N+1] token offsets of the lines.
    """
    n_lines = line_ptr.shape[0] - 1
    ptr = np.zeros(n_lines + 1, dtype=np.int64)
    use_ngrams = bucket > 0 and word_ngrams > 1
    for s in range(n_lines):
        a, b = line_ptr[s], line_ptr[s + 1]
        n = 0
        for t in range(a, b):
            if tok_word[t] >= 0:
                n += 1
            if use_ngrams:
                n += min(b, t + word_ngrams) - t - 1
        ptr[s + 1] = ptr[s] + n
    idx = np.empty(ptr[-1], dtype=np.int32)
    ub = np.uint64(max(bucket, 1))
    for s in range(n_lines):
        a, b = line_ptr[s], line_ptr[s + 1]
        k = ptr[s]
        for t in range(a, b):
            if tok_word[t] >= 0:
                idx[k] = tok_word[t]
                k += 1
        if use_ngrams:
            for t in range(a, b):
                h = tok_hash[t]
                for j in range(t + 1, min(b, t + word_ngrams)):
                    h = h * _NGRAM_MUL + tok_hash[j]
                    idx[k] = n_words + np.int64(h % ub)
                    k += 1
    return ptr, idx


@nb.njit(inline="always")
def _hidden(emb, row_ptr, row_idx, s, hidden):
    """hidden[:] = mean of line s's rows; returns their number (0: hidden stays zero)."""
    for k in range(hidden.shape[0]):
        hidden[k] = 0.0
    n = row_ptr[s + 1] - row_ptr[s]
    for r in range(row_ptr[s], row_ptr[s + 1]):
        row = row_idx[r]
        for k in range(hidden.shape[0]):
            hidden[k] += emb[row, k]
    if n > 0:
        inv = np.float32(1.0 / n)
        for k in range(hidden.shape[0]):
            hidden[k] *= inv
    return n


@nb.njit(inline="always")
def softmax_update(hidden, target, wo, scores, grad, lr):
    """Full-softmax SGD step: scores = softmax(wo·hidden); for every label i,
    α_i = lr·(1[i = target] - p_i), grad += α_i·wo[i] (the row before its update), wo[i] += α_i·hidden."""
    n_labels, dim = wo.shape
    top = -np.inf
    for i in range(n_labels):
        f = np.float32(0.0)
        for k in range(dim):
            f += wo[i, k] * hidden[k]
        scores[i] = f
        top = max(top, f)
    z = 0.0
    for i in range(n_labels):
        scores[i] = math.exp(scores[i] - top)
        z += scores[i]
    for i in range(n_labels):
        label = 1.0 if i == target else 0.0
        alpha = np.float32(lr * (label - scores[i] / z))
        for k in range(dim):
            r = wo[i, k]
            grad[k] += alpha * r
            wo[i, k] = r + alpha * hidden[k]


@nb.njit(nogil=True, fastmath=True, cache=True)
def train_sup_chunk(
    emb, wo, row_ptr, row_idx, line_ptr, lab_ptr, lab_idx, s0, s1,
    hs, codes, points, lengths, exp_tab,
    lr0, words_before, words_all, seed, epoch, chunk,
):  # fmt: skip
    """One SGD step per line ``s0..s1-1`` (Hogwild; releases the GIL); returns the lines trained.

    The learning rate is fastText's ``lr0·(1 - progress)``, progress = tokens seen / (epochs × tokens),
    a line at token offset o of this epoch having seen ``words_before + o``.  A line with several
    labels trains on one of them drawn uniformly (fastText's softmax/hs); lines without a label or
    without input rows are skipped.
    """
    dim = emb.shape[1]
    state = seed_state(seed, epoch, chunk)
    hidden = np.empty(dim, dtype=np.float32)
    grad = np.empty(dim, dtype=np.float32)
    scores = np.empty(max(wo.shape[0], 1), dtype=np.float64)
    trained = 0
    for s in range(s0, s1):
        n_lab = lab_ptr[s + 1] - lab_ptr[s]
        if n_lab == 0:
            continue
        n = _hidden(emb, row_ptr, row_idx, s, hidden)
        if n == 0:
            continue
        lr = max(0.0, lr0 * (1.0 - (words_before + line_ptr[s]) / words_all))
        pick = np.int64(0)
        if n_lab > 1:
            state = lcg(state)
            pick = np.int64((state >> np.uint64(16)) % np.uint64(n_lab))
        target = lab_idx[lab_ptr[s] + pick]
        for k in range(dim):
            grad[k] = 0.0
        if hs:
            hs_update(hidden, target, wo, codes, points, lengths, grad, lr, exp_tab)
        else:
            softmax_update(hidden, target, wo, scores, grad, lr)
        inv = np.float32(1.0 / n)
        for k in range(dim):
            grad[k] *= inv
        for r in range(row_ptr[s], row_ptr[s + 1]):
            row = row_idx[r]
            for k in range(dim):
                emb[row, k] += grad[k]
        trained += 1
    return trained


@nb.njit(parallel=True, cache=True)
def label_log_probs(emb, wo, row_ptr, row_idx, hs, codes, points, lengths, n_labels):
    """float32 [N, L]: log p(label | line) under the model (exact sigmoid/softmax, not the table).

    Hierarchical softmax: the sum over the label's Huffman path of log σ(±h·u), + where the code
    is 0 (the side :func:`ptmkit.static.kernels.w2v.hs_update` trains towards σ = 1).  A line without input rows
    has a zero hidden vector.
    """
    n_lines = row_ptr.shape[0] - 1
    dim = emb.shape[1]
    out = np.zeros((n_lines, n_labels), dtype=np.float32)
    for s in nb.prange(n_lines):
        hidden = np.empty(dim, dtype=np.float32)
        _hidden(emb, row_ptr, row_idx, s, hidden)
        if hs:
            for lab in range(n_labels):
                total = 0.0
                for j in range(lengths[lab]):
                    f = 0.0
                    node = points[lab, j]
                    for k in range(dim):
                        f += wo[node, k] * hidden[k]
                    x = f if codes[lab, j] == 0 else -f
                    total -= math.log1p(math.exp(-x)) if x > 0 else -x + math.log1p(math.exp(x))
                out[s, lab] = total
        else:
            scores = np.empty(n_labels, dtype=np.float64)
            top = -np.inf
            for lab in range(n_labels):
                f = 0.0
                for k in range(dim):
                    f += wo[lab, k] * hidden[k]
                scores[lab] = f
                top = max(top, f)
            z = 0.0
            for lab in range(n_labels):
                z += math.exp(scores[lab] - top)
            for lab in range(n_labels):
                out[s, lab] = scores[lab] - top - math.log(z)
    return out
