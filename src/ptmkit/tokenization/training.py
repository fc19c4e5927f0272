"""Deterministic training of the subword kinds (``wordpiece``, ``bpe``, ``unigram``).

HF ``tokenizers``' WordPiece and Unigram trainers depend on the iteration order of Rust hash maps,
which is random per process: the same corpus and settings give a different ``tokenizer.json`` (and
so different token ids and runs) from one process to the next.  (Its BPE trainer escapes only
because the byte-level alphabet fixes every symbol id before training.)  Here the words are counted
with HF's own normaliser and pre-tokenizer, sorted, and the vocabulary is learnt by the fixed-order
trainers of :mod:`~ptmkit.tokenization.merges` (BPE and WordPiece, one algorithm) and
:mod:`~ptmkit.tokenization.unigram`; HF models are then built from the result, so encoding stays
HF's.  ``char`` and ``word`` keep HF's ``WordLevelTrainer``, which sorts by count, then token.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

from ptmkit.data.textfiles import TextFile, TextFormat
from ptmkit.tokenization import kinds as K
from ptmkit.tokenization.languages import balanced_shares
from ptmkit.tokenization.merges import train_merges
from ptmkit.tokenization.unigram import train_unigram

SUBWORD_KINDS = ("wordpiece", "bpe", "unigram")


def text_lines(paths: Sequence[str], fmt: TextFormat = TextFormat()) -> Iterator[str]:
    """The lines of the training files, with the line ends kept, as HF trainers read a text file
    (so that, e.g., byte-level BPE sees the newline as ``Ċ``); JSON Lines, CSV, Parquet and
    compressed files as the plain text they stand for (:mod:`ptmkit.data.textfiles`)."""
    for path in paths:
        with TextFile(path, fmt) as f:
            yield from f.lines()


def count_words(tok: Tokenizer, paths: Sequence[str], fmt: TextFormat = TextFormat()) -> tuple[list[str], np.ndarray]:
    """The distinct words of ``paths`` as ``tok``'s normaliser and pre-tokenizer cut them (sorted),
    and their counts.

    Files are read line by line (:func:`text_lines`).  One call per line into HF's Rust code; the
    words are counted by ``Counter`` without a Python loop over them.  (Counting through HF's own
    parallel trainer and encoder instead takes two passes and twice the CPU time.)
    """
    norm, pre = tok.normalizer, tok.pre_tokenizer
    counter: Counter[str] = Counter()
    first = operator.itemgetter(0)
    for line in text_lines(paths, fmt):
        if norm is not None:
            line = norm.normalize_str(line)
        counter.update(map(first, pre.pre_tokenize_str(line)))
    words = sorted(w for w in counter if w)
    return words, np.array([counter[w] for w in words], dtype=np.int64)


def balanced_counts(tok: Tokenizer, paths: Sequence[str], languages: Sequence[str], alpha: float,
                    fmt: TextFormat = TextFormat()) -> tuple[list[str], np.ndarray, dict[str, float]]:
    """The word counts of ``paths`` (file ``k`` in language ``languages[k]``) re-weighted so that
    language ``i`` holds the share ``q_i ∝ p_i^alpha`` of all words (``p_i``: its natural share;
    :func:`~ptmkit.tokenization.languages.balanced_shares`).

    XLM samples training sentences by ``q_i``; scaling each language's counts by ``q_i / p_i`` is
    that sampling's expectation, without the sampling noise.  Returns the sorted words, their
    weighted counts (int64, a word seen at all keeps a count of at least 1) and ``q`` per language.
    """
    groups: dict[str, list[str]] = {}
    for path, code in zip(paths, languages):
        groups.setdefault(code, []).append(path)
    counted = {code: count_words(tok, files, fmt) for code, files in groups.items()}
    totals = np.array([float(c.sum()) for _, c in counted.values()])
    q = balanced_shares(totals, alpha)
    p = totals / totals.sum()
    merged: dict[str, float] = {}
    for (words, counts), qi, pi in zip(counted.values(), q, p):
        if pi == 0:
            continue
        scaled = np.maximum(np.rint(counts * (qi / pi)), 1)
        for w, c in zip(words, scaled.tolist()):
            merged[w] = merged.get(w, 0.0) + c
    words = sorted(merged)
    return words, np.array([merged[w] for w in words], dtype=np.int64), dict(zip(counted, q.tolist()))


def train_subword(tok: Tokenizer, kind: str, paths: Sequence[str], vocab_size: int, min_frequency: int,
                  fmt: TextFormat = TextFormat(), counted: tuple[list[str], np.ndarray] | None = None) -> None:
    """Train ``tok`` (from :func:`kinds.build`) of a subword ``kind`` in place (on ``counted`` words
    and counts where given, else on the words of ``paths``)."""
    words, counts = counted if counted is not None else count_words(tok, paths, fmt)
    if kind == "wordpiece":
        vocab, _ = train_merges(words, counts, vocab_size, min_frequency, K.SPECIAL_TOKENS, prefix="##")
        tok.model = models.WordPiece(vocab, unk_token=K.UNK, continuing_subword_prefix="##", max_input_chars_per_word=100)
    elif kind == "bpe":
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        vocab, merges = train_merges(words, counts, vocab_size, min_frequency, K.SPECIAL_TOKENS, alphabet)
        tok.model = models.BPE(vocab, merges)
    elif kind == "unigram":
        pieces = train_unigram(words, counts, vocab_size, len(K.SPECIAL_TOKENS))
        specials = [(t, 0.0) for t in K.SPECIAL_TOKENS]
        tok.model = models.Unigram(specials + pieces, unk_id=K.SPECIAL_TOKENS.index(K.UNK), byte_fallback=False)
    else:
        raise ValueError(kind)
    tok.add_special_tokens(list(K.SPECIAL_TOKENS))
