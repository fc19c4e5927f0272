"""A deterministic Unigram LM trainer (Kudo 2018) for the ``unigram`` kind.

Why not HF's ``UnigramTrainer``: it walks its words in hash-map order, which changes from process to
process; the floating-point sums of its EM steps then differ in the last bits (which can flip close
pruning decisions) and the characters it adds at the end are scored in that order, so the same
corpus gives a different ``tokenizer.json`` on every run.  This trainer runs the same algorithm
(SentencePiece's, as ``tokenizers`` implements it) over the words in a fixed order, single-threaded:

1. seeds: every character, then the substrings of 2..``max_piece_length`` characters that occur in
   at least two places among the distinct words and are followed by at least two different
   characters or word ends (the internal nodes of the words' suffix tree), scored by
   occurrences x length; the best ``seed_size`` are kept and the scores normalised to log-probs;
2. EM: two E-steps (forward-backward over each word's lattice, weighted by the word's count) and
   M-steps (Bayesian/digamma update, pieces expected fewer than 0.5 times dropped), then pruning:
   each piece's loss is the likelihood lost if its Viterbi uses went to its best alternative
   segmentation, and the best 75 % are kept (at least 1.1 x ``vocab_size``); the loop ends once
   at most 1.1 x ``vocab_size`` pieces are left;
3. finalisation: every character of the corpus (a missing one gets the lowest score plus 0.0001
   per character, in code point order), then the other pieces in the model's order up to
   ``vocab_size``, sorted by score.

Ties are broken by fixed rules (score, then the piece's code points; earlier pieces first).  On PTB
the vocabulary equals the one ``UnigramTrainer`` learns, scores within 1e-9.  The lattices are
built once: every occurrence of a seed piece in the words is an edge found from the sorted
suffixes, and later steps only switch pieces off.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from scipy.special import digamma

UNK_PENALTY = 10.0  # an unknown character scores the lowest piece score minus this (as SentencePiece)


@nb.njit(cache=True)
def _lse(a, b):
    """log(exp(a) + exp(b)) with -inf as the empty sum."""
    if a < b:
        a, b = b, a
    if b == -np.inf:
        return a
    return a + math.log1p(math.exp(b - a))


@nb.njit(cache=True)
def _suffix_keys(cps, rem, n_cols):
    """Sort keys of every suffix cut after ``n_cols`` characters: 3 characters (code point + 1, 21
    bits each) per int64, 0 once the word has ended."""
    n = cps.shape[0]
    n_keys = (n_cols + 2) // 3
    keys = np.zeros((n_keys, n), np.int64)
    for i in range(n):
        for c in range(min(n_cols, rem[i])):
            keys[c // 3, i] |= np.int64(cps[i + c] + 1) << (21 * (2 - c % 3))
    return keys


@nb.njit(cache=True)
def _seed_nodes(sa, cps, rem, n_cols, max_len):
    """``(depth, first, last)`` of every internal node of the words' suffix tree (an lcp interval of
    the sorted suffixes ``sa``) spelling 2..``max_len`` characters within one word.

    A word end counts as one more character that matches only the same word end: a substring that
    always ends its words is not a node, as in the suffix array over ``word\\0word\\0...``."""
    n = sa.shape[0]
    lcp = np.zeros(n + 1, np.int64)
    for k in range(1, n):
        a = sa[k - 1]
        b = sa[k]
        m = min(rem[a], rem[b], n_cols)
        c = 0
        while c < m and cps[a + c] == cps[b + c]:
            c += 1
        if c == m and rem[a] == rem[b] and c < n_cols:
            c += 1  # both words end here
        lcp[k] = c
    lcp[n] = 0  # closes every open interval but the root
    depth_out, first_out, last_out = [0], [0], [0]
    st_depth, st_first = [0], [0]
    for k in range(1, n + 1):
        first = k - 1
        while lcp[k] < st_depth[-1]:
            d = st_depth.pop()
            first = st_first.pop()
            if 2 <= d <= max_len and d <= rem[sa[first]]:
                depth_out.append(d)
                first_out.append(first)
                last_out.append(k - 1)
        if lcp[k] > st_depth[-1]:
            st_depth.append(lcp[k])
            st_first.append(first)
    return np.array(depth_out[1:]), np.array(first_out[1:]), np.array(last_out[1:])


@nb.njit(cache=True)
def _e_step(wstart, wlen, wcount, ptr, elen, epiece, score, alive, unk_score):
    """Expected count of every piece: forward-backward over each word's lattice, times its count."""
    expected = np.zeros(score.shape[0])
    size = wlen.max() + 1
    fwd = np.empty(size)
    bwd = np.empty(size)
    for w in range(wstart.shape[0]):
        s, n = wstart[w], wlen[w]
        fwd[: n + 1] = -np.inf
        bwd[: n + 1] = -np.inf
        fwd[0] = 0.0
        bwd[n] = 0.0
        for i in range(n):
            single = False
            for e in range(ptr[s + i], ptr[s + i + 1]):
                if alive[epiece[e]]:
                    single |= elen[e] == 1
                    fwd[i + elen[e]] = _lse(fwd[i + elen[e]], fwd[i] + score[epiece[e]])
            if not single:
                fwd[i + 1] = _lse(fwd[i + 1], fwd[i] + unk_score)
        for i in range(n - 1, -1, -1):
            single = False
            for e in range(ptr[s + i], ptr[s + i + 1]):
                if alive[epiece[e]]:
                    single |= elen[e] == 1
                    bwd[i] = _lse(bwd[i], score[epiece[e]] + bwd[i + elen[e]])
            if not single:
                bwd[i] = _lse(bwd[i], unk_score + bwd[i + 1])
        z = fwd[n]
        c = wcount[w]
        for i in range(n):
            single = False
            for e in range(ptr[s + i], ptr[s + i + 1]):
                if alive[epiece[e]]:
                    single |= elen[e] == 1
                    expected[epiece[e]] += c * math.exp(fwd[i] + score[epiece[e]] + bwd[i + elen[e]] - z)
            if not single:
                expected[0] += c * math.exp(fwd[i] + unk_score + bwd[i + 1] - z)
    return expected


@nb.njit(cache=True)
def _viterbi(s, n, skip, ptr, elen, epiece, score, alive, unk_score, best, back_len, back_piece):
    """Best segmentation of positions ``s..s+n`` (edge ``skip`` left out) into ``best``/``back_*``;
    on equal scores the piece that starts first wins (as ``tokenizers``' lattice)."""
    best[: n + 1] = -np.inf
    best[0] = 0.0
    for i in range(n):
        single = False
        for e in range(ptr[s + i], ptr[s + i + 1]):
            if e == skip or not alive[epiece[e]] or i + elen[e] > n:
                continue
            single |= elen[e] == 1
            v = best[i] + score[epiece[e]]
            if v > best[i + elen[e]]:
                best[i + elen[e]] = v
                back_len[i + elen[e]] = elen[e]
                back_piece[i + elen[e]] = epiece[e]
        if not single:
            v = best[i] + unk_score
            if v > best[i + 1]:
                best[i + 1] = v
                back_len[i + 1] = 1
                back_piece[i + 1] = 0
    return best[n]


@nb.njit(cache=True)
def _prune_stats(wstart, wlen, wcount, ptr, epos, elen, epiece, score, alive, unk_score, rep_edge, rep_len):
    """Viterbi counts of every piece over the words, and for every alive piece whether it is the best
    segmentation of its own spelling with, if so, the pieces of the next best one."""
    n_pieces = score.shape[0]
    size = max(wlen.max(), rep_len.max()) + 1
    best = np.empty(size)
    back_len = np.zeros(size, np.int64)
    back_piece = np.zeros(size, np.int64)
    freq = np.zeros(n_pieces)
    for w in range(wstart.shape[0]):
        _viterbi(wstart[w], wlen[w], -1, ptr, elen, epiece, score, alive, unk_score, best, back_len, back_piece)
        j = wlen[w]
        while j > 0:
            freq[back_piece[j]] += wcount[w]
            j -= back_len[j]
    own_best = np.ones(n_pieces, np.bool_)
    alt_ptr = np.zeros(n_pieces + 1, np.int64)
    alt = [0]
    for pid in range(n_pieces):
        if alive[pid] and rep_len[pid] > 1:
            e = rep_edge[pid]
            other = _viterbi(epos[e], rep_len[pid], e, ptr, elen, epiece, score, alive, unk_score,
                             best, back_len, back_piece)
            if other > score[pid]:
                own_best[pid] = False
            else:
                j = rep_len[pid]
                while j > 0:
                    alt.append(back_piece[j])
                    j -= back_len[j]
        alt_ptr[pid + 1] = len(alt) - 1
    return freq, own_best, alt_ptr, np.array(alt[1:], dtype=np.int64)


def _min_score(score: np.ndarray, alive: np.ndarray) -> float:
    return float(score[alive].min()) if alive.any() else 0.0


def train_unigram(
    words: list[str],
    counts: np.ndarray,
    vocab_size: int,
    n_special: int,
    max_piece_length: int = 16,
    seed_size: int = 1_000_000,
    shrinking_factor: float = 0.75,
    n_sub_iterations: int = 2,
) -> list[tuple[str, float]]:
    """Pieces with their log-probability scores, best first: at most ``vocab_size - n_special``.

    ``words``: distinct non-empty words in a fixed order; ``counts``: their frequencies.
    """
    if len(words) != len(counts) or not all(words):
        raise ValueError("expected as many counts as words, and no empty word")
    if not words:
        return []
    counts = np.asarray(counts, dtype=np.int64)
    wlen = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    cps = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    wstart = np.cumsum(wlen) - wlen
    word_of = np.repeat(np.arange(len(words)), wlen)
    rem = (wstart + wlen)[word_of] - np.arange(cps.size)  # characters left in the word

    # 1. Seeds: characters by count (then code point), descending ...
    chars, char_of = np.unique(cps, return_inverse=True)
    char_count = np.zeros(chars.size, dtype=np.int64)
    np.add.at(char_count, char_of, counts[word_of])
    if chars.size > vocab_size:
        raise ValueError(f"the text has {chars.size} distinct characters, more than the vocabulary size {vocab_size}")
    char_rank = np.lexsort((-chars, -char_count))
    # ... then substrings by occurrences x length (then code points), descending.
    n_cols = max_piece_length + 1
    keys = _suffix_keys(cps, rem, n_cols)
    sa = np.lexsort(keys[::-1])
    depth, first, last = _seed_nodes(sa, cps, rem, n_cols, max_piece_length)
    sub_score = (last - first + 1) * depth
    pos = sa[first]
    spelled = keys[:, pos].copy()  # the node's characters only: mask out the columns past depth
    for c in range(n_cols):
        spelled[c // 3, depth <= c] &= ~(np.int64((1 << 21) - 1) << (21 * (2 - c % 3)))
    rank = np.lexsort([-k for k in spelled[::-1]] + [-sub_score])[: max(0, seed_size - chars.size)]
    depth, first, last, pos, sub_score = depth[rank], first[rank], last[rank], pos[rank], sub_score[rank]

    # Piece ids: 0 = unknown, 1.. = characters, then substrings, in seed order.
    n_chars = chars.size
    n_pieces = 1 + n_chars + depth.size
    char_id = np.empty(n_chars, dtype=np.int64)
    char_id[char_rank] = 1 + np.arange(n_chars)
    seed = np.concatenate([[0.0], char_count[char_rank].astype(np.float64), sub_score.astype(np.float64)])
    score = np.full(n_pieces, np.nan)
    score[1:] = np.log(seed[1:]) - math.log(seed[1:].sum())
    piece_len = np.concatenate([[1], np.ones(n_chars, dtype=np.int64), depth])
    piece_pos = np.concatenate([[0], np.zeros(n_chars, dtype=np.int64), pos])

    # Lattice edges: every position's character, and every occurrence of every seed substring
    # (the suffixes sa[first..last] of its node), sorted by position then length.
    occ = last - first + 1
    occ_idx = np.repeat(first - np.cumsum(occ) + occ, occ) + np.arange(occ.sum())
    epos = np.concatenate([np.arange(cps.size), sa[occ_idx]])
    elen = np.concatenate([np.ones(cps.size, dtype=np.int64), np.repeat(depth, occ)])
    epiece = np.concatenate([char_id[char_of], np.repeat(1 + n_chars + np.arange(depth.size), occ)])
    order = np.lexsort((elen, epos))
    epos, elen, epiece = epos[order], elen[order], epiece[order]
    ptr = np.searchsorted(epos, np.arange(cps.size + 1))
    # Each substring's edge at its representative position (its spelling for pruning).
    rep_edge = np.zeros(n_pieces, dtype=np.int64)
    is_rep = epos == piece_pos[epiece]
    rep_edge[epiece[is_rep & (elen > 1)]] = np.nonzero(is_rep & (elen > 1))[0]

    # 2. EM with pruning; ``pieces`` is the model's piece order (unknown first), which the final
    # cut and the stable sorts follow, as in ``tokenizers``.
    alive = np.zeros(n_pieces, dtype=bool)
    alive[1:] = True
    pieces = np.arange(n_pieces)
    desired = vocab_size * 11 // 10
    total_count = float(counts.sum())
    while True:
        for _ in range(n_sub_iterations):
            unk_score = _min_score(score, alive) - UNK_PENALTY
            expected = _e_step(wstart, wlen, counts, ptr, elen, epiece, score, alive, unk_score)
            kept = pieces[1:][expected[pieces[1:]] >= 0.5]
            alive[:] = False
            alive[kept] = True
            score[:] = np.nan
            score[kept] = digamma(expected[kept]) - digamma(expected[kept].sum())
            pieces = np.concatenate([[0], kept])
        if pieces.size <= desired:
            break
        unk_score = _min_score(score, alive) - UNK_PENALTY
        freq, own_best, alt_ptr, alt = _prune_stats(
            wstart, wlen, counts, ptr, epos, elen, epiece, score, alive, unk_score, rep_edge, piece_len
        )
        ids = pieces[1:]
        f = freq[ids]
        n_alt = np.diff(alt_ptr)[ids]
        drop = (f == 0) & ~own_best[ids]  # never in a Viterbi segmentation
        keep = ids[~drop & (n_alt == 0)]  # no alternative (a character): kept
        cand = ~drop & (n_alt > 0) & (f > 0)
        # Loss: the likelihood lost if this piece's Viterbi uses went to its alternative pieces.
        # (``tokenizers`` normalises the alternative with the number of pieces where SentencePiece
        # uses the number of alternatives; kept, so that the vocabulary stays the one it learns.)
        owner = np.repeat(np.arange(n_pieces), np.diff(alt_ptr))
        with np.errstate(divide="ignore"):  # log 0 only for pieces that are no candidates
            log_alt = np.bincount(owner, weights=np.log(freq[alt] + freq[owner]), minlength=n_pieces)
        freq_sum = freq.sum()
        fc, nc = f[cand], n_alt[cand]
        logprob = np.log(fc) - math.log(freq_sum)
        logprob_alt = log_alt[ids[cand]] - nc * np.log(freq_sum + fc * (pieces.size - 1))
        loss = fc / total_count * (logprob - logprob_alt)
        size = max(desired, int(pieces.size * shrinking_factor))
        ranked = ids[cand][np.argsort(-loss, kind="stable")]
        new = np.concatenate([[0], keep, ranked[: max(0, size - 1 - keep.size)]])
        if new.size >= pieces.size:
            break  # nothing left to prune
        dropped = np.setdiff1d(pieces, new)
        alive[dropped] = False
        score[dropped] = np.nan
        pieces = new

    # 3. Every character (code point order), then the model's pieces in order, up to the size.
    min_score = _min_score(score, alive)
    out: list[tuple[str, float]] = []
    penalty = 0.0
    for c in range(n_chars):
        pid = char_id[c]
        if alive[pid]:
            out.append((chr(chars[c]), float(score[pid])))
        else:  # dropped by the M-step: scored just above the lowest score
            out.append((chr(chars[c]), min_score + penalty))
            penalty += 0.0001
    for pid in pieces[1:].tolist():
        if len(out) >= vocab_size - n_special:
            break
        if piece_len[pid] > 1:
            p, n = piece_pos[pid], piece_len[pid]
            out.append((cps[p:p + n].astype(np.uint32).tobytes().decode("utf-32-le"), float(score[pid])))
    out.sort(key=lambda piece: -piece[1])  # stable: equal scores keep their order
    return out
