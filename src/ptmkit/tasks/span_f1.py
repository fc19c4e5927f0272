"""Chunk (entity) precision, recall and F1 over BIO-style tag sequences, as CoNLL's ``conlleval``.

Tags are strings ``PREFIX-TYPE`` (``B-PER``, ``I-LOC``, ``E-ORG``, ``S-MISC``) or ``O``.  Chunks are
read with conlleval's lenient rules, which also decide ill-formed sequences (an ``I-`` after ``O``
opens a chunk; a type change closes one), so IOB1, IOB2 and IOBES all score as the CoNLL shared
tasks scored them, and ``seqeval``'s default mode gives the same numbers (the tests check it).

The rules are evaluated on whole arrays (one comparison per rule over all tokens), not in a loop
over tokens: a chunk ends between ``t - 1`` and ``t`` when

* the previous tag is ``E`` or ``S``; or
* the previous tag is ``B`` or ``I`` and the current one is ``B``, ``S`` or ``O``; or
* the previous tag is a chunk tag and the type changes;

and a chunk starts at ``t`` when the tag is ``B`` or ``S``; or it is ``I``/``E`` after ``O``, ``E``
or ``S``; or it is a chunk tag whose type differs from the previous tag's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ptmkit.errors import PtmError

_O, _B, _I, _E, _S, _OTHER = 0, 1, 2, 3, 4, 5
_PREFIX = {"O": _O, "B": _B, "I": _I, "E": _E, "S": _S}


def _encode(tags: Sequence[str], types: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Prefix codes and type ids ``int64 [n]`` of ``tags``; ``types`` grows with new type names."""
    prefix = np.empty(len(tags), dtype=np.int64)
    kind = np.empty(len(tags), dtype=np.int64)
    for i, tag in enumerate(tags):  # string parsing only; the chunk rules below are vectorised
        if not isinstance(tag, str) or not tag:
            raise PtmError(f"span_f1: tag {i} is {tag!r}; tags are strings such as 'B-PER', 'I-LOC' or 'O'")
        prefix[i] = _PREFIX.get(tag[0], _OTHER)
        name = tag[1:].split("-", 1)[-1] or "_"
        kind[i] = types.setdefault(name, len(types))
    return prefix, kind


def chunks(sentences: Sequence[Sequence[str]]) -> set[tuple[int, int, int, int]]:
    """The chunks of every sentence: a set of ``(sentence, type id, start, end)`` (end inclusive).

    Type ids are numbered in order of first appearance; :func:`span_scores` compares gold and
    predicted tags with one type table for both.
    """
    return _chunks(sentences, {})


def _chunks(sentences: Sequence[Sequence[str]], types: dict[str, int]) -> set[tuple[int, int, int, int]]:
    out: set[tuple[int, int, int, int]] = set()
    for s, tags in enumerate(sentences):
        if isinstance(tags, str):
            raise PtmError("span_f1: pass a list of tag sequences (one list of tags per sentence)")
        prefix, kind = _encode(list(tags) + ["O"], types)
        prev_prefix = np.concatenate([[_O], prefix[:-1]])
        prev_kind = np.concatenate([[types.setdefault("_", len(types))], kind[:-1]])
        in_chunk = (prev_prefix != _O) & (prev_prefix != _OTHER)
        type_change = prev_kind != kind
        ends = (
            (prev_prefix == _E) | (prev_prefix == _S)
            | (((prev_prefix == _B) | (prev_prefix == _I)) & np.isin(prefix, (_B, _S, _O)))
            | (in_chunk & type_change)
        )
        tag_in = (prefix != _O) & (prefix != _OTHER)
        starts = (
            (prefix == _B) | (prefix == _S)
            | (np.isin(prefix, (_I, _E)) & np.isin(prev_prefix, (_O, _E, _S)))
            | (tag_in & type_change)
        )
        idx = np.arange(len(prefix))
        last_start = np.maximum.accumulate(np.where(starts, idx, 0))  # the open chunk's first token
        for i in np.flatnonzero(ends):  # one iteration per chunk, not per token
            out.add((s, int(prev_kind[i]), int(last_start[i - 1]), int(i - 1)))
    return out


@dataclass(frozen=True)
class SpanScores:
    precision: float
    recall: float
    f1: float
    n_gold: int
    n_pred: int
    n_correct: int
    per_type: dict[str, dict[str, float]]


def _prf(correct: int, pred: int, gold: int) -> tuple[float, float, float]:
    p = correct / pred if pred else 0.0
    r = correct / gold if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def span_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> SpanScores:
    """Micro-averaged chunk P/R/F1 of ``pred`` against ``gold`` (lists of tag lists), plus per type.

    A predicted chunk is correct when its type, start and end all equal a gold chunk's.
    """
    if len(gold) != len(pred):
        raise PtmError(f"span_f1: {len(gold)} gold sentences but {len(pred)} predicted")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise PtmError(f"span_f1: sentence {i} has {len(g)} gold tags but {len(p)} predicted")
    types: dict[str, int] = {}
    g_chunks = _chunks(gold, types)
    p_chunks = _chunks(pred, types)
    correct = g_chunks & p_chunks
    names = {v: k for k, v in types.items()}
    per_type: dict[str, dict[str, float]] = {}
    for t in sorted({c[1] for c in g_chunks | p_chunks}):
        n_g = sum(c[1] == t for c in g_chunks)
        n_p = sum(c[1] == t for c in p_chunks)
        n_c = sum(c[1] == t for c in correct)
        p, r, f = _prf(n_c, n_p, n_g)
        per_type[names[t]] = {"precision": p, "recall": r, "f1": f, "support": n_g}
    p, r, f = _prf(len(correct), len(p_chunks), len(g_chunks))
    return SpanScores(p, r, f, len(g_chunks), len(p_chunks), len(correct), per_type)


__all__ = ["SpanScores", "chunks", "span_scores"]
