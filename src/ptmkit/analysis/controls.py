"""Control tasks (Hewitt & Liang 2019, "Designing and Interpreting Probes with Control Tasks").

A control task gives every word *type* a fixed random output, so only memorising word identities
solves it; a probe's *selectivity* is its accuracy on the linguistic task minus its accuracy on
the control task, with the same probe and features.

* Tagging (POS, relation labels): each word type ``v`` gets a control label ``C(v)`` drawn once from
  the empirical distribution of the task's labels over all tokens (H&L section 3.1).
* Dependency edges: each word type gets one of three behaviours, uniformly: attach to itself, to
  the first word of the sentence or to the last (H&L section 3.2).
* Trees (for the structural probe, which needs a tree): the same idea made a tree — every word type
  draws a random rank and a random bit; the word of the highest rank is the root, an anchor word
  (the last word, or the first when the last is the root) attaches to it, and every other word to
  the root or to the anchor as its type's bit decides.  Both the root and the attachments are
  facts about word types that a probe can only memorise (a root fixed by position, say always the
  first word, would be found from position alone and make the depth probe's control easy).

The draws follow the sorted list of word types from one seeded generator, so a type gets the
same control output in every split and every run.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

BEHAVIOURS = ("self", "first", "last")


def _types(sentences: Sequence[Sequence[str]]) -> list[str]:
    return sorted({w for s in sentences for w in s})


def control_labels(sentences: Sequence[Sequence[str]], labels: Sequence[Sequence[str]], seed: int = 0) -> dict[str, str]:
    """word type -> control label, drawn from the labels' empirical distribution over the tokens of
    ``labels`` (aligned with ``sentences``; pass every split's words so each type has a label)."""
    counts = Counter(label for sent in labels for label in sent)
    names = sorted(counts)
    p = np.array([counts[n] for n in names], dtype=np.float64)
    rng = np.random.default_rng([seed, 101])
    types = _types(sentences)
    draws = rng.choice(len(names), size=len(types), p=p / p.sum())
    return {w: names[k] for w, k in zip(types, draws)}


def control_behaviours(sentences: Sequence[Sequence[str]], seed: int = 0) -> dict[str, str]:
    """word type -> ``self`` | ``first`` | ``last`` (uniform), H&L's dependency control."""
    types = _types(sentences)
    draws = np.random.default_rng([seed, 103]).integers(len(BEHAVIOURS), size=len(types))
    return {w: BEHAVIOURS[k] for w, k in zip(types, draws)}


def control_heads(words: Sequence[str], behaviour: dict[str, str]) -> np.ndarray:
    """The control "head" index of every word of one sentence ``[W]`` (itself, 0, or W - 1)."""
    W = len(words)
    where = {"self": None, "first": 0, "last": W - 1}
    return np.array([i if where[behaviour[w]] is None else where[behaviour[w]] for i, w in enumerate(words)],
                    dtype=np.int64)


def control_tree(words: Sequence[str], side: dict[str, int], rank: dict[str, int]) -> np.ndarray:
    """A control tree ``[W]`` of head indices (-1 at the root): the word of the highest
    ``rank[type]`` (the first of them) is the root; the anchor, the last word (the first when the
    last is the root), attaches to it; every other word to the root (``side[type] == 0``) or the anchor."""
    W = len(words)
    root = int(np.argmax([rank[w] for w in words]))
    anchor = W - 1 if root != W - 1 else 0
    heads = np.array([root if side[w] == 0 else anchor for w in words], dtype=np.int64)
    heads[anchor] = root
    heads[root] = -1
    return heads


def control_sides(sentences: Sequence[Sequence[str]], seed: int = 0) -> dict[str, int]:
    """word type -> 0 (attach to the root) or 1 (to the anchor), one fair coin per type."""
    types = _types(sentences)
    draws = np.random.default_rng([seed, 107]).integers(2, size=len(types))
    return {w: int(k) for w, k in zip(types, draws)}


def control_ranks(sentences: Sequence[Sequence[str]], seed: int = 0) -> dict[str, int]:
    """word type -> its place in one random order of all types (the control tree's root: the highest)."""
    types = _types(sentences)
    order = np.random.default_rng([seed, 109]).permutation(len(types))
    return {w: int(k) for w, k in zip(types, order)}


def selectivity(task_accuracy: float, control_accuracy: float) -> float:
    """H&L's selectivity: task accuracy minus control accuracy."""
    return float(task_accuracy - control_accuracy)


__all__ = ["BEHAVIOURS", "control_behaviours", "control_heads", "control_labels", "control_ranks", "control_sides",
           "control_tree", "selectivity"]
