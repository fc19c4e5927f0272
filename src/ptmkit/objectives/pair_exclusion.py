"""Leaving a fine-tuning task's evaluation pairs out of a pre-training lexicon of word pairs.

A lexical objective that is told "these two words are related" (LIBERT's ``objective.pairs``)
and is then fine-tuned on a task that asks whether two words are related (``wordnet-hypernym``)
would be scored on pairs it was shown in pre-training.  :func:`task_pairs` reads the word pairs
of a built-in task's dev and test splits (every example, whatever its label: a pair the task
marks unrelated, such as a reversed hypernym, is just as much an answer given away), and
:func:`exclude_pairs` drops the lexicon pairs among them.

A task's example is a word pair when it is a sentence-pair classification example whose two
texts each name a term, alone (``dog``) or followed by a gloss (``dog: a member of the genus
Canis``), the term at most :data:`MAX_TERM_WORDS` words long.  Words are compared as
:func:`ptmkit.knowledge.graph.normalise` writes them (lower-cased, ``_`` read as a space, single
spaces), in either order: the task writes ``head of state`` and ``English``, WordNet's lexicon
``head of state`` and ``english``, a user's file may write ``head_of_state``.
"""

from __future__ import annotations

import numpy as np

from ptmkit.data.tasks import SPLITS, TaskData, load_task
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import normalise

EVAL_SPLITS = ("dev", "test")  # the splits a fine-tuned model is scored on
MAX_TERM_WORDS = 10  # wordnet-hypernym's longest terms have 9 words; a longer text is a sentence
GLOSS = ": "  # between a term and its gloss (``lemma: definition``)


def task_names(value: str) -> tuple[str, ...]:
    """``TASK[,TASK...]`` -> the task names, each once, in order; an empty name is an error."""
    names = [n.strip() for n in value.split(",")]
    if not all(names):
        raise PtmError(f"objective.pairs_exclude={value!r}: expected TASK[,TASK...], built-in task names "
                       f"such as wordnet-hypernym, with no empty name")
    return tuple(dict.fromkeys(names))


def term(text: str) -> str | None:
    """The term a task text names (``"dog: a member of ..."`` -> ``"dog"``, normalised), or
    ``None`` when the text is not a term with an optional gloss."""
    head = normalise(text.split(GLOSS, 1)[0])
    return head if head and len(head.split(" ")) <= MAX_TERM_WORDS else None


def pair_key(a: str, b: str) -> tuple[str, str]:
    """Two words as one order-free key (normalised, sorted)."""
    x, y = normalise(a), normalise(b)
    return (x, y) if x <= y else (y, x)


def task_pairs(name: str) -> set[tuple[str, str]]:
    """The word pairs (:func:`pair_key`) of every example of built-in task ``name``'s dev and test
    splits; :class:`PtmError` for an unknown task or one whose examples are not word pairs."""
    data = load_task(name)  # an unknown name is refused here, with the known ones listed
    if not isinstance(data, TaskData) or any(data.split(s).text_pairs is None for s in SPLITS):
        raise PtmError(f"objective.pairs_exclude={name}: task {name!r} is not a sentence-pair classification "
                       f"task, so its examples are not word pairs; name a task such as wordnet-hypernym")
    out: set[tuple[str, str]] = set()
    for split in EVAL_SPLITS:
        part = data.split(split)
        for row, (text, pair) in enumerate(zip(part.texts, part.text_pairs), 1):  # once per example
            a, b = term(text), term(pair)
            if a is None or b is None:
                bad = text if a is None else pair
                raise PtmError(f"objective.pairs_exclude={name}: {split} example {row} is not a word pair "
                               f"({bad[:60]!r} is not a term of at most {MAX_TERM_WORDS} words); name a task whose "
                               f"examples are word pairs")
            out.add(pair_key(a, b))
    return out


def exclude_pairs(words: list[str], pairs: np.ndarray, excluded: set[tuple[str, str]]) -> np.ndarray:
    """``pairs`` int64 ``[P, 2]`` (indices into ``words``) without those whose two words form a
    key of ``excluded`` (either order), in their order: ``int64 [P', 2]``."""
    keys = [pair_key(words[a], words[b]) for a, b in pairs.tolist()]  # once per lexicon pair, at build time
    keep = np.fromiter((k not in excluded for k in keys), dtype=bool, count=len(keys))
    return pairs[keep]


__all__ = ["EVAL_SPLITS", "MAX_TERM_WORDS", "exclude_pairs", "pair_key", "task_names", "task_pairs", "term"]
