"""Words to the model's pieces.

A sentence is a list of words (whitespace-split text or a treebank's tokens).  It is encoded as the
words joined by single spaces, as the model saw running text in pre-training (so a byte-level BPE
sees each word with its leading space), and every piece is given to the word its character span
falls in, through the tokenizer's offsets.  A piece that spans two words, or a word that receives no
piece, cannot be aligned: :class:`PtmError` naming the word and the tokenizer.

Framing as in fine-tuning (:func:`ptmkit.tasks.tagging.encode_words`): ``[CLS] pieces [SEP]``, and
for a causal model ``pieces [SEP]`` (the final ``[SEP]`` changes no earlier position).  A sentence
longer than ``max_len`` pieces keeps the words whose pieces all fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ptmkit.errors import PtmError


@dataclass
class Aligned:
    """One framed sentence: ``ids [T]``, ``word_of [T]`` (each token's word, -1 for special tokens),
    ``words`` (those kept: all but a cut tail) and ``spans [W, 2]`` (each word's first and one-past-last
    token position)."""

    ids: np.ndarray
    word_of: np.ndarray
    words: list[str]
    spans: np.ndarray


def _word_spans(words: Sequence[str]) -> tuple[str, np.ndarray]:
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    starts_a = np.array(starts, dtype=np.int64)
    return " ".join(words), np.stack([starts_a, starts_a + np.array([len(w) for w in words], dtype=np.int64)], 1)


def _owner(s: int, e: int, chars: np.ndarray, sentence: Sequence[str], tokenizer: Any) -> int:
    """The word a piece with character span ``[s, e)`` belongs to (a piece of spaces alone: the next word)."""
    hit = np.flatnonzero((chars[:, 0] < e) & (chars[:, 1] > s))
    if len(hit) > 1:
        raise PtmError(f"the {getattr(tokenizer, 'kind', '')} tokenizer makes one piece of the words "
                       f"{[sentence[k] for k in hit]} (characters {s}..{e}); the analysis aligns every piece to one "
                       f"word: use a tokenizer that splits at spaces")
    if len(hit) == 1:
        return int(hit[0])
    after = np.flatnonzero(chars[:, 0] >= e)
    return int(after[0]) if len(after) else -1


def align_sentences(tokenizer: Any, sentences: Sequence[Sequence[str]], causal: bool,
                    max_len: int | None = None) -> list[Aligned]:
    """Frame and align a batch of sentences (each a non-empty list of words without spaces)."""
    texts, spans = zip(*(_word_spans(s) for s in sentences)) if sentences else ((), ())
    encoded = tokenizer.encode_batch_with_offsets(list(texts))
    head = [] if causal else [tokenizer.cls_id]
    out = []
    for sentence, chars, (ids, offsets) in zip(sentences, spans, encoded):
        owner = np.array([_owner(int(s), int(e), chars, sentence, tokenizer) if e > s else -1
                          for s, e in offsets], dtype=np.int64)
        got = np.bincount(owner[owner >= 0], minlength=len(sentence))
        if (got == 0).any():
            k = int(np.flatnonzero(got == 0)[0])
            raise PtmError(f"the {getattr(tokenizer, 'kind', '')} tokenizer gives no piece for the word {sentence[k]!r} "
                           f"of {' '.join(sentence)[:80]!r} (its offsets cannot be aligned to words); this model's "
                           f"tokenizer cannot be analysed word by word")
        if (np.diff(owner[owner >= 0]) < 0).any():
            raise PtmError(f"the pieces of {' '.join(sentence)[:80]!r} are not in word order; this model's tokenizer "
                           f"cannot be aligned to words")
        keep_pieces = len(ids)
        if max_len is not None:
            budget = max_len - len(head) - 1
            if budget < 1:
                raise PtmError(f"the model's {max_len} positions leave no room for words")
            keep_pieces = min(keep_pieces, budget)
            if keep_pieces < len(ids):  # drop the word cut in the middle
                cut = owner[keep_pieces]
                keep_pieces = int(np.flatnonzero(owner == cut)[0]) if cut >= 0 else keep_pieces
        kept_owner = owner[:keep_pieces]
        n_words = int(kept_owner.max()) + 1 if (kept_owner >= 0).any() else 0
        token_ids = np.array(head + list(ids[:keep_pieces]) + [tokenizer.sep_id], dtype=np.int64)
        word_of = np.concatenate([np.full(len(head), -1), kept_owner, [-1]]).astype(np.int64)
        pos = np.arange(len(word_of))
        first = np.array([pos[word_of == w].min() for w in range(n_words)], dtype=np.int64)
        last = np.array([pos[word_of == w].max() + 1 for w in range(n_words)], dtype=np.int64)
        out.append(Aligned(token_ids, word_of, list(sentence[:n_words]),
                           np.stack([first, last], 1) if n_words else np.zeros((0, 2), dtype=np.int64)))
    return out


__all__ = ["Aligned", "align_sentences"]
