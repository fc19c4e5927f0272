"""word2vec vectors as a Transformer's initial word embeddings (train.init_embeddings)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.static.init_embeddings import corpus_as_ids, init_word_embeddings
from ptmkit.train.config import TrainConfig


def toy_corpus(n_sent: int = 20000, seed: int = 0) -> SimpleNamespace:
    """Sentences ``x a y`` / ``x b y`` / ``u c v``: tokens 10 and 11 share their contexts, 12 does not."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_sent):
        k = rng.integers(0, 3)
        left, right = (rng.integers(20, 30), rng.integers(30, 40)) if k < 2 else (rng.integers(40, 50), rng.integers(50, 60))
        rows.append([left, 10 + k, right])
    tokens = np.array(rows, dtype=np.uint16).ravel()
    sentences = np.arange(0, len(tokens) + 1, 3, dtype=np.int64)
    return SimpleNamespace(tokens=tokens, sentences=sentences, documents=np.array([0, n_sent], dtype=np.int64))


def test_corpus_as_ids_keeps_exactly_the_covered_sentences() -> None:
    c = toy_corpus(20)
    spans = np.array([[3, 9], [15, 18], [6, 12]])  # sentences 1-3 and 5 (overlaps counted once)
    vocab, ids, token_of = corpus_as_ids(c, spans, 64)
    expected = np.concatenate([c.tokens[3:12], c.tokens[15:18]]).astype(np.int64)
    np.testing.assert_array_equal(token_of[ids.ids], expected)
    np.testing.assert_array_equal(ids.sentences, [0, 3, 6, 9, 12])
    assert np.all(np.diff(vocab.counts) <= 0)  # most frequent first
    assert vocab.total == len(expected)


def test_a_span_past_the_corpus_end_keeps_the_last_sentences() -> None:
    c = toy_corpus(20)  # 60 tokens, sentences every 3
    _, ids, token_of = corpus_as_ids(c, np.array([[54, 61]]), 64)
    np.testing.assert_array_equal(token_of[ids.ids], c.tokens[54:60].astype(np.int64))


def test_initialised_rows_carry_word2vec_similarity() -> None:
    c = toy_corpus()
    spans = np.stack([c.sentences[:-1], c.sentences[1:]], axis=1)
    torch.manual_seed(0)
    weight = torch.nn.Embedding(64, 16).weight
    before = weight.detach().clone()
    n = init_word_embeddings(weight, c, spans, "skipgram", std=0.02, epochs=5, seed=3)
    present = np.unique(c.tokens.astype(np.int64))
    assert n == len(present)
    absent = np.setdiff1d(np.arange(64), present)
    assert torch.equal(weight[absent], before[absent])  # unseen tokens keep their random rows
    rows = weight.detach()[present].double()
    assert abs(rows.std(unbiased=False).item() - 0.02) < 1e-6 and rows.mean(0).abs().max() < 1e-6
    w = torch.nn.functional.normalize(weight.detach().double(), dim=1)
    assert (w[10] @ w[11]).item() > (w[10] @ w[12]).item() + 0.3  # shared contexts -> similar vectors

    again = torch.nn.Embedding(64, 16).weight
    init_word_embeddings(again, c, spans, "skipgram", std=0.02, epochs=5, seed=3)
    torch.testing.assert_close(again[present], weight[present])  # deterministic for a seed


def test_config_names_the_valid_methods() -> None:
    assert TrainConfig(init_embeddings="cbow").init_embeddings == "cbow"
    with pytest.raises(PtmError, match="skipgram"):
        TrainConfig(init_embeddings="skipgrm")
