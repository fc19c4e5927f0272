"""Clark et al.'s attention analysis of one model: token statistics per head over the corpus's
first sentences, and, on a treebank, each head's accuracy at finding a dependent's head word per
relation beside the best positional offset."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ptmkit.analysis.attention_stats import AttentionStream
from ptmkit.analysis.corpus_text import sentences
from ptmkit.analysis.extract import SentenceStates, word_states
from ptmkit.analysis.models import Subject
from ptmkit.analysis.treebank import Tree
from ptmkit.compress.importance import head_shape

_PUNCT = set(string.punctuation)


def is_punctuation(word: str) -> bool:
    """A word made of punctuation characters only (``.``, ``,``, ``--``, ``''`` ...)."""
    return bool(word) and all(ch in _PUNCT for ch in word)


def _feed(stream: AttentionStream, s: SentenceStates, tokenizer: Any, tree: Tree | None = None) -> None:
    a = s.aligned
    punct_word = np.array([is_punctuation(w) for w in a.words] + [False], dtype=bool)
    is_punct = punct_word[np.where(a.word_of >= 0, a.word_of, len(a.words))]
    kwargs: dict[str, Any] = {}
    if tree is not None:
        cut = tree.cut(len(a.words))
        if cut is not None:
            kwargs = {"word_of": a.word_of, "heads": cut.heads, "relations": cut.relations}
    stream.add(s.attentions, a.ids == tokenizer.cls_id, a.ids == tokenizer.sep_id, is_punct, **kwargs)


def attention(subject: Subject, corpus: str | Path | None, max_sentences: int = 1000,
              trees: Sequence[Tree] | None = None, batch_size: int = 16) -> dict[str, Any]:
    """``stats`` (per statistic ``[layers][heads]``) over the corpus's first ``max_sentences``
    sentences (or the trees' sentences when no corpus), and ``relations`` over ``trees``."""
    layers, heads = head_shape(subject.backbone)
    stream = AttentionStream(layers, heads)
    source: Iterable[Sequence[str]] = sentences(corpus, max_sentences) if corpus else [t.words for t in trees or ()]
    for s in word_states(subject.backbone, subject.tokenizer, source, subject.causal, attentions=True,
                         batch_size=batch_size):
        _feed(stream, s, subject.tokenizer)
    out = stream.result()
    if trees:
        syn = AttentionStream(layers, heads)
        for s in word_states(subject.backbone, subject.tokenizer, [t.words for t in trees], subject.causal,
                             attentions=True, batch_size=batch_size):
            _feed(syn, s, subject.tokenizer, trees[s.index])
        out["relations"] = syn.result(min_relation_count=20)["relations"]
        out["tree_sentences"] = len(trees)
    return out


__all__ = ["attention", "is_punctuation"]
