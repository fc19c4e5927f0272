"""A deterministic BPE merge trainer (for the ``bpe`` and ``wordpiece`` kinds).

Why not HF's ``BpeTrainer`` / ``WordPieceTrainer``: they number the symbols they meet while walking
a hash map of words, whose order changes from process to process, and break ties between equally
frequent pairs by those numbers; the same corpus can then give a different vocabulary on every run.

This trainer follows the same algorithm (``tokenizers``' ``BpeTrainer``) with every order fixed:

* ids: the special tokens, then every character of the corpus (plus ``initial_alphabet``) sorted by
  code point, then (with a ``prefix``) the continuation symbols ``prefix + c`` sorted by code point,
  then the merged tokens in the order they are made;
* each step merges the most frequent adjacent pair (counts weighted by word frequency); among equally
  frequent pairs the one with the smallest ``(left id, right id)`` wins, as in ``BpeTrainer``;
* a merge whose string already exists (``ab + c`` after ``a + bc``) reuses that token's id.

With the byte-level alphabet (every id fixed before training) this reproduces ``BpeTrainer``'s
output exactly.  Words are counted by the caller, in a fixed order.

The merge loop runs in numba over a flat array of the symbols of all distinct words (a doubly linked
list per word); each pair keeps the list of positions where it was formed, so a merge only visits
the words that contain it, and a heap with lazy deletion finds the next best pair.
"""

from __future__ import annotations

import heapq

import numba as nb
import numpy as np
from numba import types
from numba.typed import Dict, List

_SHIFT = 32  # a pair (a, b) is the int64 key a << 32 | b; ids stay far below 2**31
_MASK = (1 << _SHIFT) - 1
_ENTRY = types.UniTuple(types.int64, 2)  # a heap entry: (-count, pair key)


@nb.njit(cache=True)
def _add(key, delta, pos, table, keys, count, head, occ_pos, occ_next):
    """Add ``delta`` to the count of pair ``key``; with ``pos >= 0`` record that it formed at ``pos``."""
    if key in table:
        s = table[key]
    else:
        s = len(keys)
        table[key] = s
        keys.append(key)
        count.append(0)
        head.append(-1)
    count[s] += delta
    if pos >= 0:
        occ_pos.append(pos)
        occ_next.append(head[s])
        head[s] = len(occ_pos) - 1
    return s


@nb.njit(cache=True)
def _pop(table, count, heap, min_count):
    """The key of the most frequent pair (ties: the smallest key), or -1 if none reaches ``min_count``.

    Heap entries are ``(-count at push time, key)``; an entry whose count has changed since is
    pushed again with the current count (or dropped at zero).
    """
    while len(heap) > 0:
        neg, key = heapq.heappop(heap)
        c = count[table[key]]
        if c != -neg:
            if c > 0:
                heapq.heappush(heap, (-c, key))
            continue
        return key if c >= min_count else -1
    return -1


@nb.njit(cache=True)
def _merge(key, new, step, sym, nxt, prv, weight, table, keys, count, head, occ_pos, occ_next, stamp, heap):
    """Replace every occurrence of pair ``key`` by symbol ``new`` and update the pair counts."""
    a = key >> _SHIFT
    b = key & _MASK
    s0 = table[key]
    where = List.empty_list(types.int64)
    i = head[s0]
    while i >= 0:
        where.append(occ_pos[i])
        i = occ_next[i]
    # Left to right inside a word, so that "a a a" merges as (a a) a, as BpeTrainer does.
    where = np.sort(np.asarray(where))
    grown = List.empty_list(types.int64)
    for p in where:
        q = nxt[p]
        if sym[p] != a or q < 0 or sym[q] != b:
            continue  # stale: an earlier merge has changed this position
        w = weight[p]
        left = prv[p]
        right = nxt[q]
        if left >= 0:
            _add((sym[left] << _SHIFT) | a, -w, -1, table, keys, count, head, occ_pos, occ_next)
            s = _add((sym[left] << _SHIFT) | new, w, left, table, keys, count, head, occ_pos, occ_next)
            while len(stamp) < len(keys):
                stamp.append(-1)
            if stamp[s] != step:
                stamp[s] = step
                grown.append(s)
        sym[p] = new
        sym[q] = -1
        nxt[p] = right
        if right >= 0:
            prv[right] = p
            _add((b << _SHIFT) | sym[right], -w, -1, table, keys, count, head, occ_pos, occ_next)
            s = _add((new << _SHIFT) | sym[right], w, p, table, keys, count, head, occ_pos, occ_next)
            while len(stamp) < len(keys):
                stamp.append(-1)
            if stamp[s] != step:
                stamp[s] = step
                grown.append(s)
    count[s0] = 0
    head[s0] = -1
    for s in grown:
        if count[s] > 0:
            heapq.heappush(heap, (-count[s], keys[s]))


@nb.njit(cache=True)
def _find(h, cont, chars, tchars, tstart, tlen, tcont, index):
    """``(id, probe key)``: the token spelled ``chars`` (continuation form if ``cont``) or -1, and
    the key under which it is (or would be) stored in ``index`` (hash, then linear probing)."""
    k = np.int64(h ^ (np.uint64(0x9E3779B97F4A7C15) if cont else np.uint64(0)))
    while k in index:
        t = index[k]
        if tcont[t] == cont and tlen[t] == chars.shape[0]:
            same = True
            for j in range(chars.shape[0]):
                if tchars[tstart[t] + j] != chars[j]:
                    same = False
                    break
            if same:
                return t, k
        k += 1
    return -1, k


@nb.njit(cache=True)
def _learn(sym, nxt, prv, weight, chars0, start0, len0, cont0, vocab_size, min_count):
    """Run the merges; return ``(merged pair keys, token spellings: chars, start, length, flag)``.

    Tokens are spelled as code point runs (``chars0[start0[t]:start0[t] + len0[t]]``) with a flag for
    the continuation form; a merged token is spelled ``left + right`` with the left's flag.  Tokens
    are found by spelling through a rolling hash, so a merge that spells an existing token reuses it.
    """
    table = Dict.empty(types.int64, types.int64)
    keys = List.empty_list(types.int64)
    count = List.empty_list(types.int64)
    head = List.empty_list(types.int64)
    occ_pos = List.empty_list(types.int64)
    occ_next = List.empty_list(types.int64)
    stamp = List.empty_list(types.int64)
    heap = List.empty_list(_ENTRY)
    for p in range(sym.shape[0]):
        if nxt[p] >= 0:
            _add((sym[p] << _SHIFT) | sym[nxt[p]], weight[p], p, table, keys, count, head, occ_pos, occ_next)
    for s in range(len(keys)):
        heapq.heappush(heap, (-count[s], keys[s]))

    # Token spellings and the index from spelling to id.
    tchars = List.empty_list(types.int32)
    tstart = List.empty_list(types.int64)
    tlen = List.empty_list(types.int64)
    tcont = List.empty_list(types.boolean)
    thash = List.empty_list(types.uint64)
    tpow = List.empty_list(types.uint64)
    index = Dict.empty(types.int64, types.int64)
    base = np.uint64(1000003)
    for t in range(start0.shape[0]):
        h = np.uint64(0)
        pw = np.uint64(1)
        chars = chars0[start0[t]:start0[t] + len0[t]]
        for c in chars:
            h = h * base + np.uint64(c)
            pw = pw * base
        tstart.append(len(tchars))
        for c in chars:
            tchars.append(c)
        tlen.append(len0[t])
        tcont.append(cont0[t])
        thash.append(h)
        tpow.append(pw)
        found, k = _find(h, cont0[t], chars, tchars, tstart, tlen, tcont, index)
        if found < 0:
            index[k] = t

    merged = List.empty_list(types.int64)
    n_tokens = len(index)
    step = 0
    while n_tokens < vocab_size:
        key = _pop(table, count, heap, min_count)
        if key < 0:
            break
        a = key >> _SHIFT
        b = key & _MASK
        chars = np.empty(tlen[a] + tlen[b], np.int32)
        for j in range(tlen[a]):
            chars[j] = tchars[tstart[a] + j]
        for j in range(tlen[b]):
            chars[tlen[a] + j] = tchars[tstart[b] + j]
        h = thash[a] * tpow[b] + thash[b]
        new, k = _find(h, tcont[a], chars, tchars, tstart, tlen, tcont, index)
        if new < 0:
            new = len(tlen)
            index[k] = new
            tstart.append(len(tchars))
            for c in chars:
                tchars.append(c)
            tlen.append(chars.shape[0])
            tcont.append(tcont[a])
            thash.append(h)
            tpow.append(tpow[a] * tpow[b])
            n_tokens += 1
        merged.append(key)
        _merge(key, new, step, sym, nxt, prv, weight, table, keys, count, head, occ_pos, occ_next, stamp, heap)
        step += 1
    return np.asarray(merged), np.asarray(tchars), np.asarray(tstart), np.asarray(tlen), np.asarray(tcont)


def train_merges(
    words: list[str],
    counts: np.ndarray,
    vocab_size: int,
    min_frequency: int,
    special_tokens: list[str],
    initial_alphabet: list[str] = (),
    prefix: str | None = None,
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``(vocab, merges)`` learnt from distinct, non-empty ``words`` with their ``counts``.

    ``prefix`` (WordPiece's ``##``) marks symbols that continue a word: the first character of a
    word is a plain symbol, the others are ``prefix + c``, and a merge keeps the left part's form
    (``t + ##h -> th``, ``##h + ##e -> ##he``).  Merging stops at ``vocab_size`` tokens (special
    tokens and the whole alphabet are always kept) or when no pair occurs ``min_frequency`` times.
    """
    if len(words) != len(counts) or not all(words):
        raise ValueError("expected as many counts as words, and no empty word")
    lens = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    cps = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32).astype(np.int32)
    starts = np.cumsum(lens) - lens
    first = np.zeros(cps.shape[0], dtype=bool)
    first[starts] = True

    # The initial tokens and their spellings: special tokens, alphabet, continuation symbols.
    alphabet = np.union1d(cps, np.array([ord(c) for c in initial_alphabet], dtype=np.int32))
    cont = np.unique(cps[~first]) if prefix else np.zeros(0, dtype=np.int32)
    n_special = len(special_tokens)
    spelled = [np.array([ord(c) for c in t], dtype=np.int32) for t in special_tokens]
    chars0 = np.concatenate([*spelled, alphabet, cont]).astype(np.int32)
    len0 = np.array([len(t) for t in special_tokens] + [1] * (alphabet.size + cont.size), dtype=np.int64)
    start0 = np.cumsum(len0) - len0
    cont0 = np.zeros(len0.size, dtype=bool)
    cont0[n_special + alphabet.size:] = True

    sym = np.searchsorted(alphabet, cps).astype(np.int64) + n_special
    if prefix:
        sym[~first] = np.searchsorted(cont, cps[~first]) + n_special + alphabet.size
    n = cps.shape[0]
    nxt = np.arange(1, n + 1, dtype=np.int64)
    nxt[starts + lens - 1] = -1
    prv = np.arange(-1, n - 1, dtype=np.int64)
    prv[starts] = -1
    weight = np.repeat(np.asarray(counts, dtype=np.int64), lens)

    merged, tchars, tstart, tlen, tcont = _learn(
        sym, nxt, prv, weight, chars0, start0, len0, cont0, vocab_size, max(1, min_frequency)
    )
    id_to_tok = list(special_tokens) + [chr(c) for c in alphabet] + [prefix + chr(c) for c in cont]
    for t in range(len(id_to_tok), tlen.size):
        text = tchars[tstart[t]:tstart[t] + tlen[t]].tobytes().decode("utf-32-le")
        id_to_tok.append(prefix + text if tcont[t] else text)
    vocab: dict[str, int] = {}
    for i, t in enumerate(id_to_tok):
        vocab.setdefault(t, i)
    merges = [(id_to_tok[k >> _SHIFT], id_to_tok[k & _MASK]) for k in merged.tolist()]
    return vocab, merges
