"""fastText with hierarchical softmax: the kernel's update against a float64 reference, and learning."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.static.fasttext import FastTextConfig, subwords, train_fasttext
from ptmkit.static.huffman import build_huffman
from ptmkit.static.kernels.ft import train_ft_chunk
from ptmkit.static.kernels.w2v import _EXP_SCALE, MAX_EXP, exp_table
from ptmkit.static.sampling import negative_table

WORDS = ["the", "cat", "sat", "mat", "on"]
COUNTS = np.array([9, 5, 3, 2, 1])


def _reference(emb, syn1, ptr, idx, sentence, tree, sg, alpha, tab):
    """float64 replay of the kernel on one sentence with window 1, no subsampling.

    Hidden = mean of the word's subword rows (CBOW: of all context rows); each Huffman node on the
    target's path adds (1 - code - σ(h·u))·alpha·u to the input gradient and the same times h to u
    (σ from word2vec's table, nodes beyond ±MAX_EXP skipped); the gradient goes whole to every row.
    """
    emb, syn1 = emb.astype(np.float64), syn1.astype(np.float64)
    rows = [idx[ptr[w] : ptr[w + 1]] for w in range(len(ptr) - 1)]
    scale = _EXP_SCALE

    def hs(h, target, grad):
        for j in range(tree.lengths[target]):
            u = syn1[tree.points[target, j]]
            f = float(h @ u)
            if abs(f) >= MAX_EXP:
                continue
            g = (1.0 - tree.codes[target, j] - float(tab[int((f + MAX_EXP) * scale)])) * alpha
            grad += g * u
            u += g * h  # in place: syn1's row

    n = len(sentence)
    for i in range(n):
        ctx = [sentence[j] for j in (i - 1, i + 1) if 0 <= j < n]
        grad = np.zeros(emb.shape[1])
        if sg:
            h = emb[rows[sentence[i]]].mean(axis=0)
            for c in ctx:
                hs(h, c, grad)
            np.add.at(emb, rows[sentence[i]], grad)  # a row listed twice (hash collision) gets it twice
        else:
            h = emb[np.concatenate([rows[c] for c in ctx])].mean(axis=0)
            hs(h, sentence[i], grad)
            for c in ctx:
                np.add.at(emb, rows[c], grad)
    return emb, syn1


@pytest.mark.parametrize("sg", [True, False])
def test_hs_update_matches_float64_reference(sg):
    rng = np.random.default_rng(3)
    dim, bucket, v = 6, 11, len(WORDS)
    ptr, idx = subwords(WORDS, 2, 3, bucket, v, True)
    emb = rng.uniform(-0.5, 0.5, (v + bucket, dim)).astype(np.float32)
    tree = build_huffman(COUNTS)
    syn1 = rng.uniform(-0.5, 0.5, (v - 1, dim)).astype(np.float32)
    sentence = np.array([1, 0, 2], dtype=np.int32)  # cat the sat (cbow: "sat"'s context is "the" only)
    tab, alpha = exp_table(), 0.1
    want_emb, want_syn1 = _reference(emb, syn1, ptr, idx, sentence.tolist(), tree, sg, alpha, tab)
    before = emb.copy(), syn1.copy()
    keep = np.ones(v, dtype=np.float32)
    train_ft_chunk(
        emb, np.zeros((1, dim), np.float32), syn1, ptr, idx, sentence, np.array([0, 3], np.int64), 0, 1,
        keep, negative_table(COUNTS, 0.75), tree.codes, tree.points, tree.lengths, tab, sg, True, 0, 1,
        alpha, alpha, 0.0, 3.0, 1, 0, 0,
    )  # fmt: skip
    np.testing.assert_allclose(emb, want_emb, atol=1e-6)
    np.testing.assert_allclose(syn1, want_syn1, atol=1e-6)
    touched = np.unique(np.concatenate([idx[ptr[w] : ptr[w + 1]] for w in sentence]))
    untouched = np.setdiff1d(np.arange(emb.shape[0]), touched)
    np.testing.assert_array_equal(emb[untouched], before[0][untouched])
    assert np.abs(emb[touched] - before[0][touched]).max() > 1e-3  # the step did something
    nodes = np.unique(np.concatenate([tree.points[w, : tree.lengths[w]] for w in sentence]))
    assert np.abs(syn1[nodes] - before[1][nodes]).max() > 1e-3


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_hs_learns_planted_topics(model):
    rng = np.random.default_rng(0)
    vocab = [[f"t{t}w{i}" for i in range(10)] for t in range(6)]
    sents = [[vocab[t][i] for i in rng.integers(0, 10, 10)] for t in rng.integers(0, 6, 2000)]
    cfg = FastTextConfig(model=model, loss="hs", dim=16, window=3, epochs=3, min_count=1, sample=0, bucket=2000,
                         workers=1, alpha=0.05)  # fmt: skip
    ft = train_fasttext(sents, cfg, progress=False)
    hits = [n.split("w")[0] == w.split("w")[0] for w in ft.words for n, _ in ft.wv.most_similar(w, topn=5)]
    assert np.mean(hits) > 0.6, np.mean(hits)


def test_hs_config_checks():
    assert FastTextConfig(loss="hs", negative=0).loss == "hs"  # negatives are not needed for HS
    with pytest.raises(ValueError, match="loss"):
        FastTextConfig(loss="softmax")
    with pytest.raises(ValueError, match="negative"):
        FastTextConfig(loss="ns", negative=0)


@pytest.mark.parametrize("sg", [True, False])
@pytest.mark.parametrize("hs", [True, False])
def test_thread_private_hot_rows_train_the_same_rows(sg, hs):
    """fastText's ``hot_rows``: the private copies of the top Huffman nodes / frequent words' output
    rows, merged every ``sync_words``, train what the shared rows would (up to float32 rounding at
    the merges); a wrong row mapping or a lost merge would show as a large difference."""
    from gensim.test.utils import datapath

    from ptmkit.static.sampling import keep_probabilities
    from ptmkit.static.vocab import load_corpus

    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        vocab, corpus = load_corpus([line.lower().split() for line in f], 5)
    v, dim, bucket = len(vocab), 16, 500
    ptr, idx = subwords(list(vocab.words), 3, 4, bucket, v, True)
    tree = build_huffman(vocab.counts)

    def run(hot: int):
        emb = np.random.default_rng(0).uniform(-1 / dim, 1 / dim, (v + bucket, dim)).astype(np.float32)
        syn1 = np.zeros((v - 1 if hs else 1, dim), np.float32)
        syn1neg = np.zeros((1 if hs else v, dim), np.float32)
        kept = train_ft_chunk(
            emb, syn1neg, syn1, ptr, idx, corpus.ids, corpus.sentences, 0, corpus.n_sentences,
            keep_probabilities(vocab.counts, 1e-3), negative_table(vocab.counts, 0.75),
            tree.codes, tree.points, tree.lengths, exp_table(), sg, hs, 5, 5,
            0.025, 0.0001, 0.0, float(corpus.n_words), 1, 0, 0, hot, hot, 97,
        )  # fmt: skip
        return emb, syn1 if hs else syn1neg, kept

    plain, private = run(0), run(40)
    assert plain[2] == private[2]
    touched = np.abs(plain[1]).sum(axis=1) > 0
    assert touched[-40:].all() if hs else touched[:40].all()  # the private rows were trained and merged
    np.testing.assert_allclose(private[1], plain[1], atol=2e-4)
    np.testing.assert_allclose(private[0], plain[0], atol=2e-4)


def test_hot_rows_and_sync_words_are_validated():
    with pytest.raises(ValueError, match="hot_rows"):
        FastTextConfig(hot_rows=-1)
    with pytest.raises(ValueError, match="sync_words"):
        FastTextConfig(sync_words=0)
