"""ERNIE 1.0's knowledge units: entities and phrases found in token ids, vectorised.

ERNIE (Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge Integration") masks
whole *entities* (names of people, places, organisations) and *phrases* (multi-word units)
instead of single characters, so the model has to recall them from context as a whole.  This
module finds both in a batch of token ids and returns them as ``(example, start, end)`` spans
for the ``units`` masker (:func:`ptmkit.objectives.masking.mark_units`).

Entities (:class:`EntityTable`) come from a list of strings: a dictionary file (one entity per
line, the first field; a jieba-format ``word freq tag`` line is kept only when its tag is an
entity tag, so People's Daily's ``dictionary.txt`` works as is) or a tagged JSONL corpus
(``tokens`` + BIO ``tags``, as People's Daily's ``ner/train.jsonl``).  Each string is tokenized
with the model's tokenizer; an occurrence of its token ids anywhere in an example is a unit.

Phrases (:class:`PhraseTable`) are word n-grams (n = 2..``max_words``) with high pointwise mutual
information in the training corpus, ``PMI = log(c(w1..wn) N^(n-1) / (c(w1) ... c(wn)))`` over the
corpus's words (runs of tokens from its recorded word starts, never across sentences, never
through a word holding a ``blocked`` token such as punctuation), kept when
seen at least ``min_count`` times with PMI >= ``min_pmi``, at most ``max_phrases`` of each length
(the highest PMI first).

Both are matched by 64-bit polynomial hashes of token-id sequences: an n-token window hashes to
``sum_k ids[t + k] * M^k (mod 2^64)``, a word to the hash of its tokens, a word n-gram to a
hash of its words' hashes.  Lookup is ``np.isin`` against the sorted tables, one pass per length,
so no Python loop runs over tokens or words.  (Two different sequences share a hash with
probability about 2^-64 per pair.)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmError

log = logging.getLogger(__name__)

_M = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the token-sequence hash
_W = np.uint64(0xC2B2AE3D27D4EB4F)  # odd multiplier combining word hashes into an n-gram hash
ENTITY_TAGS = ("nr", "ns", "nt", "nz")  # PKU / jieba tags of person, place, organisation, other proper names


def _powers(base: np.uint64, n: int) -> np.ndarray:
    out = np.ones(max(n, 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(1, n):  # n is a length (<= a few dozen), not a token count
            out[k] = out[k - 1] * base
    return out


def window_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """``uint64 [B, T - n + 1]``: the hash of every n-token window of ``ids [B, T]``."""
    ids = np.asarray(ids).astype(np.uint64)
    T = ids.shape[1]
    if T < n:
        return np.zeros((ids.shape[0], 0), dtype=np.uint64)
    p = _powers(_M, n)
    h = np.zeros((ids.shape[0], T - n + 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            h += ids[:, k : T - n + 1 + k] * p[k]
    return h


def sequence_hashes(seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """``uint64 [N]``: the hash of each token-id sequence (as :func:`window_hashes`)."""
    out = np.zeros(len(seqs), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, s in enumerate(seqs):  # once per table entry, when the table is built
            a = np.asarray(s, dtype=np.uint64)
            out[i] = np.sum(a * _powers(_M, len(a)), dtype=np.uint64) if len(a) else 0
    return out


def word_hashes(ids: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Words of a flat token stream: ``(hash [W], first token [W], length [W])``.

    ``ids [N]`` and ``starts [N]`` (bool, True where a word begins; the first token always does)."""
    ids = np.asarray(ids).astype(np.uint64)
    starts = np.asarray(starts, dtype=bool).copy()
    if len(ids) == 0:
        z = np.zeros(0, np.int64)
        return np.zeros(0, np.uint64), z, z
    starts[0] = True
    first = np.flatnonzero(starts)
    length = np.diff(np.append(first, len(ids)))
    offset = np.arange(len(ids)) - np.repeat(first, length)  # position of each token in its word
    p = _powers(_M, int(length.max()))
    with np.errstate(over="ignore"):
        terms = ids * p[offset]
    # uint64 sums wrap modulo 2^64, as the window hash does.
    h = np.add.reduceat(terms, first, dtype=np.uint64)
    return h, first, length


def ngram_keys(h: np.ndarray, n: int) -> np.ndarray:
    """``uint64 [W - n + 1]``: the key of each run of ``n`` consecutive word hashes."""
    W = len(h)
    if W < n:
        return np.zeros(0, np.uint64)
    key = h[: W - n + 1].copy()
    with np.errstate(over="ignore"):
        for k in range(1, n):
            key = key * _W + h[k : W - n + 1 + k]
    return key


def _blocked_words(tokens: np.ndarray, first: np.ndarray, blocked: np.ndarray | None) -> np.ndarray:
    """bool ``[W]``: the words (starting at ``first``) that hold a blocked token."""
    if blocked is None or len(first) == 0:
        return np.zeros(len(first), bool)
    hit = np.asarray(blocked, dtype=bool)[np.clip(np.asarray(tokens, dtype=np.int64), 0, len(blocked) - 1)]
    return np.maximum.reduceat(hit.astype(np.int8), first) > 0


# ---------------------------------------------------------------------------- entities
def read_entities(path: str | os.PathLike[str], entity_tags: Sequence[str] = ENTITY_TAGS) -> list[str]:
    """Entity strings from a dictionary file or a BIO-tagged JSONL file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise PtmError(f"objective.entities: {p} does not exist (a dictionary of entity strings, or a BIO-tagged .jsonl)")
    names: list[str] = []
    if p.suffix == ".jsonl":
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                tokens, tags = row["tokens"], row["tags"]
            except (ValueError, KeyError, TypeError) as exc:
                raise PtmError(f"{p}:{n}: expected a JSON object with 'tokens' and 'tags' ({exc})") from None
            names += bio_entities(tokens, tags)
    else:
        tags = set(entity_tags)
        for line in p.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if not fields:
                continue
            if len(fields) >= 3 and fields[2] not in tags:
                continue  # a jieba dictionary line whose tag is not a name
            names.append(fields[0])
    return sorted(set(names))


def bio_entities(tokens: Sequence[str], tags: Sequence[str]) -> list[str]:
    """The entity strings of one BIO-tagged sentence (tokens joined without spaces: characters)."""
    out, cur = [], []
    for tok, tag in zip(tokens, tags):
        if tag.startswith("B-") or (tag.startswith("I-") and not cur):
            if cur:
                out.append("".join(cur))
            cur = [tok]
        elif tag.startswith("I-"):
            cur.append(tok)
        else:
            if cur:
                out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


@dataclass(frozen=True)
class EntityTable:
    """Token-id hashes of the entities, per length: ``{n_tokens: sorted uint64 [k]}``."""

    by_length: dict[int, np.ndarray]

    @classmethod
    def from_strings(cls, names: Iterable[str], tokenizer: Any, max_tokens: int = 16) -> "EntityTable":
        names = [n for n in names if n]
        seqs = tokenizer.encode_batch(names) if names else []
        unk = getattr(tokenizer, "unk_id", None)
        by_len: dict[int, list[Sequence[int]]] = {}
        for s in seqs:  # once per entity when the table is built
            if 1 <= len(s) <= max_tokens and (unk is None or unk not in s):
                by_len.setdefault(len(s), []).append(s)
        return cls({n: np.unique(sequence_hashes(v)) for n, v in sorted(by_len.items())})

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_length.values())

    def find(self, ids: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """``int64 [N, 3]`` ``(example, start, end)`` of every occurrence in ``ids [B, T]``
        lying wholly on ``candidate`` positions."""
        found = [np.zeros((0, 3), np.int64)]
        cand = np.asarray(candidate, dtype=bool)
        T = ids.shape[1]
        c = np.cumsum(np.pad(cand, ((0, 0), (1, 0))).astype(np.int64), axis=1)  # candidates before each position
        for n, table in self.by_length.items():
            if n > T:
                continue
            hit = np.isin(window_hashes(ids, n), table)
            # Every token of the window must be maskable text (no [CLS], [SEP], padding).
            inside = (c[:, n:] - c[:, :-n]) == n
            b, s = np.nonzero(hit & inside)
            found.append(np.column_stack([b, s, s + n]))
        return np.concatenate(found).astype(np.int64)


# ---------------------------------------------------------------------------- phrases
@dataclass(frozen=True)
class PhraseTable:
    """High-PMI word n-grams: ``{n_words: sorted uint64 [k]}`` of their n-gram keys; ``blocked``
    (bool ``[V]`` or ``None``): token ids no phrase may contain (punctuation, symbols)."""

    by_length: dict[int, np.ndarray]
    blocked: np.ndarray | None = None

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_length.values())

    @classmethod
    def from_corpus(
        cls, tokens: np.ndarray, word_starts: np.ndarray | None, sentences: np.ndarray, max_words: int = 3,
        min_count: int = 5, min_pmi: float = 3.0, max_phrases: int = 50_000, blocked: np.ndarray | None = None,
    ) -> "PhraseTable":
        """Count words and word n-grams over the corpus (``tokens [N]``, ``word_starts [N]``,
        sentence offsets ``[S + 1]``) and keep the high-PMI n-grams (see the module docstring).
        Vectorised over the whole corpus at once: a few dozen bytes of memory per token."""
        tokens = np.asarray(tokens)
        N = len(tokens)
        starts = np.ones(N, bool) if word_starts is None else np.asarray(word_starts, dtype=bool)[:N].copy()
        sent = np.asarray(sentences, dtype=np.int64)
        sent_first = sent[:-1][sent[:-1] < N]
        starts[sent_first] = True  # a sentence always starts a word
        h, first, _ = word_hashes(tokens, starts)
        W = len(h)
        if W == 0:
            return cls({}, blocked)
        sent_of_word = np.searchsorted(sent, first, side="right") - 1
        bad = _blocked_words(tokens, first, blocked)
        uniq, counts = np.unique(h, return_counts=True)
        log_count = np.log(counts.astype(np.float64))
        log_w = np.log(float(W))
        word_logc = log_count[np.searchsorted(uniq, h)]  # log c(w) of each word occurrence
        tables: dict[int, np.ndarray] = {}
        for n in range(2, max_words + 1):
            if W < n:
                break
            keys = ngram_keys(h, n)
            same = sent_of_word[n - 1 :] == sent_of_word[: W - n + 1]  # never across sentences
            for k in range(n):
                same &= ~bad[k : W - n + 1 + k]
            keys = keys[same]
            pos = np.flatnonzero(same)
            if len(keys) == 0:
                continue
            gk, first_idx, gcount = np.unique(keys, return_index=True, return_counts=True)
            at = pos[first_idx]
            sum_logc = sum(word_logc[at + k] for k in range(n))
            pmi = np.log(gcount.astype(np.float64)) + (n - 1) * log_w - sum_logc
            keep = (gcount >= min_count) & (pmi >= min_pmi)
            gk, pmi = gk[keep], pmi[keep]
            order = np.lexsort((gk, -pmi))[:max_phrases]  # highest PMI first, ties by key: deterministic
            tables[n] = np.sort(gk[order])
        return cls(tables, blocked)

    def find(self, ids: np.ndarray, word_starts: np.ndarray | None, candidate: np.ndarray) -> np.ndarray:
        """``int64 [N, 3]`` ``(example, start, end)`` of every phrase occurrence in ``ids [B, T]``:
        ``n`` consecutive words (runs of candidates from ``word_starts``) inside one segment."""
        B, T = ids.shape
        cand = np.asarray(candidate, dtype=bool)
        if not self.by_length or not cand.any():
            return np.zeros((0, 3), np.int64)
        starts = np.ones((B, T), bool) if word_starts is None else np.asarray(word_starts, dtype=bool)
        prev = np.zeros_like(cand)
        prev[:, 1:] = cand[:, :-1]
        begin = cand & (starts | ~prev)
        flat = cand.ravel()
        idx = np.flatnonzero(flat)  # candidate positions, row-major
        h, first, length = word_hashes(ids.ravel()[idx], begin.ravel()[idx])
        w_pos = idx[first]  # flat position of each word's first token
        w_end = idx[first + length - 1] + 1  # flat position after its last token
        # Word w and w + 1 are adjacent in one segment of one row iff nothing separates them.
        bad = _blocked_words(ids.ravel()[idx], first, self.blocked)
        joined = (w_end[:-1] == w_pos[1:]) & (w_pos[:-1] // T == w_pos[1:] // T) & ~bad[1:] & ~bad[:-1]
        found = [np.zeros((0, 3), np.int64)]
        for n, table in self.by_length.items():
            if len(h) < n:
                continue
            keys = ngram_keys(h, n)
            ok = np.isin(keys, table)
            for k in range(n - 1):
                ok &= joined[k : len(h) - n + 1 + k]
            w = np.flatnonzero(ok)
            s, e = w_pos[w], w_end[w + n - 1]
            found.append(np.column_stack([s // T, s % T, s % T + (e - s)]))
        return np.concatenate(found).astype(np.int64)
