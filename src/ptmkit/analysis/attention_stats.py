"""What attention heads look at (Clark, Khandelwal, Levy & Manning 2019, "What Does BERT Look At?").

Token level, per head (averaged over every query token of every sentence): the entropy of its
attention distribution (nats), and the share of its attention on ``[CLS]``, on ``[SEP]``, on
punctuation, on the token itself, on the previous and on the next token.

Word level (for syntax): a word's attention *to* another word is the sum over that word's pieces,
its attention *from* it the mean over its own pieces (Clark et al., section 4.1), giving
``[heads, W, W]`` per layer.  A head "predicts" a dependent's syntactic head in two directions, as
Clark et al.'s code does: ``dep->head``, the word the dependent attends to most, and ``head<-dep``,
the word that attends most to the dependent (the word itself excluded in both); its accuracy per
relation, in its better direction, is set against the positional baseline of the relation: the
best fixed offset (the head always ``k`` words to the left or right).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

STATS = ("entropy", "cls", "sep", "punct", "self", "prev", "next")
DIRECTIONS = ("dep->head", "head<-dep")  # the dependent attends to its head / the head attends to the dependent
MAX_OFFSET = 5  # positional baselines: heads from 5 words to the left to 5 to the right


def word_attention(attn: np.ndarray, word_of: np.ndarray, num_words: int) -> np.ndarray:
    """Token attention ``[..., T, T]`` -> word attention ``[..., W, W]``: columns summed over a word's
    pieces, rows averaged over them.  ``word_of [T]``: the word of each token, -1 for special tokens
    (their rows and columns are dropped)."""
    to = np.zeros((num_words, len(word_of)))
    real = word_of >= 0
    to[word_of[real], np.flatnonzero(real)] = 1.0
    per_word = np.maximum(to.sum(1, keepdims=True), 1.0)
    return (to / per_word) @ attn @ to.T  # two matrix products (a three-operand einsum loops over all five indices)


class AttentionStream:
    """Per-head statistics over sentences fed one at a time (:meth:`add`); :meth:`result` at the end.

    layers, heads: the attention maps' shape.  relations: the dependency relation labels (none for
    the token statistics alone)."""

    def __init__(self, layers: int, heads: int) -> None:
        self.N, self.H = int(layers), int(heads)
        self.sums = {k: np.zeros((self.N, self.H)) for k in STATS}
        self.tokens = 0
        self.correct: dict[str, np.ndarray] = {}  # per relation [2 directions, layers, heads]
        self.total: dict[str, int] = {}
        self.offset_correct: dict[str, np.ndarray] = {}

    def add(self, attn: np.ndarray, is_cls: np.ndarray, is_sep: np.ndarray, is_punct: np.ndarray,
            word_of: np.ndarray | None = None, heads: Sequence[int] | None = None,
            relations: Sequence[str] | None = None) -> None:
        """One sentence.  attn: ``[layers, heads, T, T]`` over its real tokens (rows sum to 1);
        is_cls / is_sep / is_punct: ``bool [T]``; word_of: ``[T]`` word of each token (-1 specials);
        heads: each word's head word index (-1 for the root), relations: each word's relation."""
        a = np.asarray(attn, dtype=np.float64)
        T = a.shape[-1]
        p = np.clip(a, 1e-12, 1.0)
        self.sums["entropy"] += -(a * np.log(p)).sum(-1).sum(-1)
        for key, mask in (("cls", is_cls), ("sep", is_sep), ("punct", is_punct)):
            self.sums[key] += a[..., np.asarray(mask, dtype=bool)].sum(-1).sum(-1)
        idx = np.arange(T)
        self.sums["self"] += a[..., idx, idx].sum(-1)
        self.sums["prev"] += a[..., idx[1:], idx[:-1]].sum(-1)
        self.sums["next"] += a[..., idx[:-1], idx[1:]].sum(-1)
        self.tokens += T
        if heads is not None and word_of is not None and relations is not None:
            self._syntax(word_attention(a, np.asarray(word_of), len(heads)), heads, relations)

    def _syntax(self, wa: np.ndarray, heads: Sequence[int], relations: Sequence[str]) -> None:
        W = wa.shape[-1]
        scores = wa.copy()
        scores[..., np.arange(W), np.arange(W)] = -np.inf  # a word is not its own head
        # [2, N, H, W]: per word, the word it attends to most / the word attending most to it
        guess = np.stack([scores.argmax(-1), scores.argmax(-2)])
        offsets = np.arange(-MAX_OFFSET, MAX_OFFSET + 1)
        for i, (h, rel) in enumerate(zip(heads, relations)):
            if h < 0:
                continue
            if rel not in self.correct:
                self.correct[rel] = np.zeros((2, self.N, self.H))
                self.total[rel] = 0
                self.offset_correct[rel] = np.zeros(len(offsets))
            self.correct[rel] += guess[..., i] == h
            self.total[rel] += 1
            self.offset_correct[rel] += (i + offsets) == h

    def result(self, min_relation_count: int = 1) -> dict[str, Any]:
        """``stats``: per statistic ``[layers][heads]`` means over tokens; ``relations``: per relation
        its count, the accuracy of every head ``[layers][heads]`` in each direction (``accuracy``:
        dep->head, ``accuracy_head_to_dep``: head<-dep), the best head over both directions (its
        ``best_direction``, dep->head on a tie) and its accuracy, and the best positional baseline
        (offset and accuracy)."""
        n = max(self.tokens, 1)
        out: dict[str, Any] = {"tokens": self.tokens, "stats": {k: (v / n).tolist() for k, v in self.sums.items()}}
        rels = {}
        offsets = np.arange(-MAX_OFFSET, MAX_OFFSET + 1)
        for rel in sorted(self.total, key=lambda r: (-self.total[r], r)):
            if self.total[rel] < min_relation_count:
                continue
            acc = self.correct[rel] / self.total[rel]
            direction, layer, head = np.unravel_index(int(acc.argmax()), acc.shape)
            base = self.offset_correct[rel] / self.total[rel]
            k = int(base.argmax())
            rels[rel] = {"count": self.total[rel], "accuracy": acc[0].round(4).tolist(),
                         "accuracy_head_to_dep": acc[1].round(4).tolist(),
                         "best_head": [int(layer), int(head)], "best_direction": DIRECTIONS[direction],
                         "best_accuracy": float(acc.max()),
                         "baseline_offset": int(offsets[k]), "baseline_accuracy": float(base[k])}
        out["relations"] = rels
        return out


__all__ = ["AttentionStream", "DIRECTIONS", "MAX_OFFSET", "STATS", "word_attention"]
