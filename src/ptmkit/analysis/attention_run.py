"""Clark et al.'s attention analysis of one model: token statistics per head over the corpus's
first sentences, and, on a treebank, each head's accuracy at finding a dependent's head word per
relation beside the best positional offset, and the attention-only probe (a linear combination of
all heads' maps trained to find each word's head)."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ptmkit.analysis.attention_probe import UPDATES, AttentionFeatures, sentence_features, train_attention_probe
from ptmkit.analysis.attention_stats import AttentionStream
from ptmkit.analysis.corpus_text import sentences
from ptmkit.analysis.extract import SentenceStates, word_states
from ptmkit.analysis.models import Subject
from ptmkit.analysis.probes import ProbeConfig
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


def probe_features(subject: Subject, trees: Sequence[Tree], batch_size: int = 16) -> tuple[list[AttentionFeatures], list[Tree]]:
    """The attention probe's features of the trees' sentences and the trees they keep (a sentence
    longer than the model keeps its first words when they still form a tree, else it is left out)."""
    feats, kept = [], []
    for s in word_states(subject.backbone, subject.tokenizer, [t.words for t in trees], subject.causal,
                         attentions=True, batch_size=batch_size):
        cut = trees[s.index].cut(len(s.aligned.words))
        if cut is not None and len(cut.words) >= 2:
            feats.append(sentence_features(s.attentions, s.aligned.word_of, len(cut.words)))
            kept.append(cut)
    return feats, kept


def attention_probe(subject: Subject, train: Sequence[Tree], test: Sequence[Tree], seed: int = 0,
                    updates: int = UPDATES) -> dict[str, Any]:
    """Clark et al.'s attention-only probe trained on ``train`` (one sentence per update, passes over
    them until ``updates``) and scored on ``test`` (UAS without punctuation, beside the
    right-branching baseline)."""
    head_shape(subject.backbone)  # an LSTM: "the lstm encoder has no attention heads ..."
    ft, tt = probe_features(subject, train)
    fs, ts = probe_features(subject, test)
    epochs = max(1, -(-updates // max(len(ft), 1)))
    return train_attention_probe(ft, [t.heads for t in tt], fs, [t.heads for t in ts], [t.punct for t in ts],
                                 ProbeConfig(epochs=epochs, lr=2e-3, batch_size=1, seed=seed))


def attention(subject: Subject, corpus: str | Path | None, max_sentences: int = 1000,
              trees: Sequence[Tree] | None = None, batch_size: int = 16,
              train_trees: Sequence[Tree] | None = None, seed: int = 0, probe_updates: int = UPDATES) -> dict[str, Any]:
    """``stats`` (per statistic ``[layers][heads]``) over the corpus's first ``max_sentences``
    sentences (or the trees' sentences when no corpus), ``relations`` over ``trees`` and, with
    ``train_trees`` too, the attention-only probe (``probe``) trained on them and scored on ``trees``."""
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
        if train_trees:
            out["probe"] = attention_probe(subject, train_trees, trees, seed, probe_updates)
    return out


__all__ = ["attention", "attention_probe", "is_punctuation", "probe_features"]
