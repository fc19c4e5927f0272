"""Batched PyTorch word2vec (run on the CPU): update rules against float64 autograd, batches, schedule, quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.config import from_dict
from ptmkit.errors import PtmError
from ptmkit.static.huffman import build_huffman
from ptmkit.static.sampling import negative_probs
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import IdCorpus, load_corpus
from ptmkit.static.word2vec import Word2VecConfig, train_word2vec
from ptmkit.static.word2vec_torch import (
    Params,
    Tables,
    cbow_step,
    hs_update,
    iter_batches,
    learning_rate,
    make_tables,
    ns_update,
    resolve_device,
    row_scale,
    skipgram_step,
    train_on_ids_torch,
)

MODES = [("skipgram", "ns"), ("cbow", "ns"), ("skipgram", "hs"), ("cbow", "hs")]


def _gen(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


# ----------------------------------------------------------------------------- update rules


def _sgns_loss(h, out_t, out_negs):
    """float64 SGNS negative log-likelihood: -log σ(h·v_t) - Σ_k log σ(-h·v_k)."""
    return -torch.nn.functional.logsigmoid(h @ out_t) - torch.nn.functional.logsigmoid(-(out_negs @ h)).sum()


def _hs_loss(h, nodes, codes):
    """float64 HS negative log-likelihood of a Huffman path: label 1 - code at each inner node."""
    f = nodes @ h
    return -((1 - codes) * torch.nn.functional.logsigmoid(f) + codes * torch.nn.functional.logsigmoid(-f)).sum()


def test_ns_update_is_sgd_on_the_sgns_loss():
    rng = np.random.default_rng(0)
    v, d, alpha = 7, 5, 0.3
    syn1neg = torch.tensor(rng.normal(0, 0.5, (v, d)), dtype=torch.float64)
    h = torch.tensor(rng.normal(0, 0.5, (2, d)), dtype=torch.float64)
    targets = torch.tensor([2, 4])
    negatives = torch.tensor([[0, 5, 5], [1, 4, 6]])  # 4 == target in row 1: skipped, as word2vec.c
    before = syn1neg.clone()
    step_h = ns_update(syn1neg, h, targets, negatives, torch.full((2,), alpha, dtype=torch.float64))
    # reference: autograd of the summed float64 loss (the skipped draw left out)
    hr, outr = h.clone().requires_grad_(), before.clone().requires_grad_()
    loss = _sgns_loss(hr[0], outr[2], outr[[0, 5, 5]]) + _sgns_loss(hr[1], outr[4], outr[[1, 6]])
    loss.backward()
    torch.testing.assert_close(step_h, -alpha * hr.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(syn1neg - before, -alpha * outr.grad, rtol=1e-10, atol=1e-12)


def test_hs_update_is_sgd_on_the_path_loss():
    counts = np.array([50, 20, 9, 7, 3, 1])
    tree = build_huffman(counts)
    rng = np.random.default_rng(1)
    d, alpha = 4, 0.2
    syn1 = torch.tensor(rng.normal(0, 0.5, (len(counts) - 1, d)), dtype=torch.float64)
    h = torch.tensor(rng.normal(0, 0.5, (3, d)), dtype=torch.float64)
    targets = torch.tensor([5, 0, 3])
    tables = Tables(
        keep=torch.ones(6), codes=torch.from_numpy(tree.codes.astype(np.int8)),
        points=torch.from_numpy(tree.points.astype(np.int64)), lengths=torch.from_numpy(tree.lengths.astype(np.int64)),
    )  # fmt: skip
    before = syn1.clone()
    step_h = hs_update(syn1, h, *tables.paths(targets), torch.full((3,), alpha, dtype=torch.float64))
    hr, nr = h.clone().requires_grad_(), before.clone().requires_grad_()
    loss = 0
    for i, t in enumerate(targets.tolist()):
        n = tree.lengths[t]
        nodes = nr[torch.from_numpy(tree.points[t, :n].astype(np.int64))]
        loss = loss + _hs_loss(hr[i], nodes, torch.from_numpy(tree.codes[t, :n].astype(np.float64)))
    loss.backward()
    torch.testing.assert_close(step_h, -alpha * hr.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(syn1 - before, -alpha * nr.grad, rtol=1e-10, atol=1e-12)


def test_expected_skipgram_ns_step_equals_expected_gradient():
    """A batch of identical pairs averages the random negatives: mean step = -alpha·E_noise[∇ loss]."""
    counts = np.array([40, 25, 12, 8, 5, 3])
    v, d, k, alpha, n = len(counts), 4, 5, 0.01, 60_000
    rng = np.random.default_rng(2)
    syn0 = torch.tensor(rng.normal(0, 0.5, (v, d)), dtype=torch.float32)
    syn1neg = torch.tensor(rng.normal(0, 0.5, (v, d)), dtype=torch.float32)
    cfg = Word2VecConfig(loss="ns", negative=k, min_count=1, sample=0)
    vocab = load_corpus([["a"]], 1)[0]
    vocab.counts = counts  # only the counts matter to the tables
    tables = make_tables(vocab, cfg, torch.device("cpu"))
    params = Params(syn0.clone(), syn1neg=syn1neg.clone())
    w_in, w_out = 1, 3
    skipgram_step(
        params, tables, torch.full((n,), w_in), torch.full((n,), w_out), torch.full((n,), alpha), k, _gen(3)
    )
    # float64 expectation: k draws from P(w) ∝ count^0.75, a draw equal to the target skipped
    p = torch.tensor(negative_probs(counts, 0.75))
    x, out = syn0.double()[w_in], syn1neg.double()
    sig = torch.sigmoid(out @ x)  # [V]
    noise = k * p.clone()
    noise[w_out] = 0.0
    exp_in = alpha * ((1 - sig[w_out]) * out[w_out] - (noise * sig) @ out)
    exp_out = -alpha * (noise * sig)[:, None] * x[None, :]
    exp_out[w_out] += alpha * (1 - sig[w_out]) * x
    torch.testing.assert_close((params.syn0.double()[w_in] - x) / n, exp_in, rtol=0.02, atol=2e-5)
    torch.testing.assert_close((params.syn1neg.double() - out) / n, exp_out, rtol=0.03, atol=2e-5)


def test_row_cap_scales_only_hot_rows():
    rows = torch.tensor([[0, 0, 3], [0, 0, 1]])
    weight = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])  # a skipped draw does not count
    expected = torch.tensor([[2 / 3, 2 / 3, 1.0], [2 / 3, 2 / 3, 1.0]])
    torch.testing.assert_close(row_scale(rows, weight, 4, 2.0), expected)
    # with n identical pairs the capped step of the input row is cap x the mean step
    counts = np.array([40, 25, 12, 8, 5, 3])
    vocab = load_corpus([["a"]], 1)[0]
    vocab.counts = counts
    tables = make_tables(vocab, Word2VecConfig(negative=2, min_count=1), torch.device("cpu"))
    syn0 = torch.randn(6, 4, generator=_gen(1)) * 0.3
    syn1neg = torch.randn(6, 4, generator=_gen(2)) * 0.3
    steps = []
    for cap in (None, 10.0):
        params = Params(syn0.clone(), syn1neg=syn1neg.clone(), row_cap=cap)
        inputs, targets, alpha = torch.full((500,), 2), torch.full((500,), 0), torch.full((500,), 0.01)
        skipgram_step(params, tables, inputs, targets, alpha, 2, _gen(7))
        steps.append(params.syn0[2] - syn0[2])
    torch.testing.assert_close(steps[1], steps[0] * 10 / 500)


@pytest.mark.parametrize("cbow_mean", [True, False])
def test_cbow_step_spreads_the_hidden_step(cbow_mean):
    """CBOW (HS): h = mean (sum) of the bag; each bag word gets the full step of h (divided by the size if sum)."""
    counts = np.array([30, 20, 10, 5, 2])
    tree = build_huffman(counts)
    rng = np.random.default_rng(4)
    d, alpha = 3, 0.1
    syn0 = torch.tensor(rng.normal(0, 0.5, (5, d)), dtype=torch.float64)
    syn1 = torch.tensor(rng.normal(0, 0.5, (4, d)), dtype=torch.float64)
    tables = Tables(
        keep=torch.ones(5), codes=torch.from_numpy(tree.codes.astype(np.int8)),
        points=torch.from_numpy(tree.points.astype(np.int64)), lengths=torch.from_numpy(tree.lengths.astype(np.int64)),
    )  # fmt: skip
    params = Params(syn0.clone(), syn1=syn1.clone())
    bag = [0, 2, 3]
    cbow_step(
        params, tables, torch.zeros(3, dtype=torch.int64), torch.tensor(bag), torch.tensor([4]),
        torch.tensor([alpha], dtype=torch.float64), 0, _gen(), cbow_mean,
    )  # fmt: skip
    hr = (syn0[bag].mean(0) if cbow_mean else syn0[bag].sum(0)).clone().requires_grad_()
    n = tree.lengths[4]
    nodes = syn1[torch.from_numpy(tree.points[4, :n].astype(np.int64))]
    _hs_loss(hr, nodes, torch.from_numpy(tree.codes[4, :n].astype(np.float64))).backward()
    step = -alpha * hr.grad / (1 if cbow_mean else len(bag))
    for w in range(5):
        expected = syn0[w] + step if w in bag else syn0[w]
        torch.testing.assert_close(params.syn0[w], expected, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- batches and schedule


def test_learning_rate_is_linear_over_all_epochs():
    assert learning_rate(0.0, 100.0, 0.025, 0.0001) == pytest.approx(0.025)
    assert learning_rate(50.0, 100.0, 0.025, 0.0001) == pytest.approx((0.025 + 0.0001) / 2)
    assert learning_rate(100.0, 100.0, 0.025, 0.0001) == pytest.approx(0.0001)
    assert learning_rate(150.0, 100.0, 0.025, 0.0001) == pytest.approx(0.0001)  # floored
    t = learning_rate(torch.tensor([0.0, 25.0, 100.0]), 100.0, 0.05, 0.0)
    torch.testing.assert_close(t, torch.tensor([0.05, 0.0375, 0.0]))


def _corpus(lengths, v=5, seed=0) -> IdCorpus:
    rng = np.random.default_rng(seed)
    sentences = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return IdCorpus(rng.integers(0, v, int(sentences[-1])).astype(np.int32), sentences)


def test_batches_follow_windows_sentences_and_schedule():
    corpus = _corpus([7, 1, 12, 4, 9])
    window, epochs, n = 3, 2, corpus.n_words
    batches = list(
        iter_batches(corpus, torch.ones(5), window, epochs, 0.05, 0.001, _gen(), batch_words=4, segment_words=15)
    )
    sent_of = np.repeat(np.arange(5), np.diff(corpus.sentences))
    alphas = []
    for epoch in range(epochs):
        pos = 0
        for e, b in batches:
            if e != epoch:
                continue
            seg = np.arange(pos, pos + b.centres.shape[0])
            pos += b.centres.shape[0]
            assert b.centres.tolist() == corpus.ids[seg].tolist()  # sample=0: every word is a centre
            expected = 0.05 - (0.05 - 0.001) * (epoch * n + seg) / (epochs * n)
            np.testing.assert_allclose(b.alpha.numpy(), expected, rtol=1e-6)
            alphas.extend(b.alpha.tolist())
            rows, words = b.ctx_rows.numpy(), b.ctx_words.numpy()
            for r in range(len(seg)):
                ctx = words[rows == r]
                # the context of a centre: a contiguous run of its own sentence within `window`
                centre = seg[r]
                lo, hi = corpus.sentences[sent_of[centre]], corpus.sentences[sent_of[centre] + 1]
                options = [
                    [corpus.ids[j] for j in range(max(lo, centre - w), min(hi, centre + w + 1)) if j != centre]
                    for w in range(1, window + 1)
                ]
                assert ctx.tolist() in options
        assert pos == n
    assert np.all(np.diff(alphas) < 0)
    # the reduced window is uniform in 1..window: all sizes occur
    sizes = [int((b.ctx_rows == 0).sum()) for _, b in batches]
    assert len(set(sizes)) > 1


def test_subsampling_keeps_words_with_their_probability():
    corpus = _corpus([20_000], v=4, seed=1)
    keep = torch.tensor([1.0, 0.5, 0.1, 0.0])
    kept = torch.cat([b.centres for _, b in iter_batches(corpus, keep, 2, 1, 0.025, 0.0, _gen(), 4096)])
    before = np.bincount(corpus.ids, minlength=4)
    after = np.bincount(kept.numpy(), minlength=4)
    np.testing.assert_allclose(after / before, keep.numpy(), atol=0.02)


def test_deterministic_given_seed():
    sents = _topic_corpus(n_sent=300)
    vocab, corpus = load_corpus(sents, 1)
    cfg = Word2VecConfig(min_count=1, epochs=1, dim=8, device="torch", seed=5, workers=1)
    a = train_on_ids_torch(vocab, corpus, cfg, progress=False, batch_words=64)[0]
    b = train_on_ids_torch(vocab, corpus, cfg, progress=False, batch_words=64)[0]
    other = Word2VecConfig(**{**cfg.__dict__, "seed": 6})
    c = train_on_ids_torch(vocab, corpus, other, progress=False, batch_words=64)[0]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


# ----------------------------------------------------------------------------- configuration


def test_bad_configs(tmp_path):
    with pytest.raises(PtmError, match="device"):
        from_dict(Word2VecConfig, {"device": "tpu"})
    with pytest.raises(PtmError, match="cuda"):
        resolve_device("mps")
    if not torch.cuda.is_available():
        with pytest.raises(PtmError, match="no CUDA"):
            resolve_device("cuda")
    vocab, corpus = load_corpus(_topic_corpus(n_sent=20), 1)
    cfg = Word2VecConfig(min_count=1, device="torch")
    with pytest.raises(PtmError, match="batch_words"):
        train_on_ids_torch(vocab, corpus, cfg, progress=False, batch_words=0)
    with pytest.raises(PtmError, match="row_cap"):
        train_on_ids_torch(vocab, corpus, cfg, progress=False, row_cap=0)
    out = tmp_path / "run"
    small = {"min_count": 1, "epochs": 1, "dim": 8, "device": "torch"}
    train_word2vec(_topic_corpus(n_sent=50), small, out=out, progress=False)
    before = (out / "vectors.bin").read_bytes()
    with pytest.raises(PtmError, match="already holds"):
        train_word2vec(_topic_corpus(n_sent=50), small, out=out, progress=False)
    assert (out / "vectors.bin").read_bytes() == before


# ----------------------------------------------------------------------------- quality


def _topic_corpus(n_topics=8, words_per_topic=12, n_sent=2000, sent_len=10, seed=0):
    """Sentences drawn from one topic each: words of a topic only co-occur with each other."""
    rng = np.random.default_rng(seed)
    vocab = [[f"t{t}w{i}" for i in range(words_per_topic)] for t in range(n_topics)]
    topics = rng.integers(0, n_topics, n_sent)
    picks = rng.integers(0, words_per_topic, (n_sent, sent_len))
    return [[vocab[t][i] for i in row] for t, row in zip(topics, picks)]


def _purity(vectors: np.ndarray, words: list[str], k: int = 5) -> float:
    wv = WordVectors(words, vectors)
    hits = sum(n.split("w")[0] == w.split("w")[0] for w in words for n, _ in wv.most_similar(w, topn=k))
    return hits / (len(words) * k)


@pytest.mark.parametrize("model,loss", MODES)
def test_learns_planted_topics_like_the_numba_kernel(model, loss):
    """Through the public entry point (device="torch", default batch size and row cap)."""
    sents = _topic_corpus(n_sent=1000)
    hp = dict(model=model, loss=loss, dim=24, window=3, epochs=5, min_count=1, sample=0, workers=1)
    numba_wv = train_word2vec(sents, Word2VecConfig(**hp), progress=False)
    torch_wv = train_word2vec(sents, Word2VecConfig(**hp, device="torch"), progress=False)
    assert torch_wv.words == numba_wv.words
    ours, reference = _purity(torch_wv.vectors, torch_wv.words), _purity(numba_wv.vectors, numba_wv.words)
    assert ours > 0.9, (ours, reference)
    assert ours >= reference - 0.05, (ours, reference)


def test_effective_words_without_subsampling():
    vocab, corpus = load_corpus(_topic_corpus(n_sent=200), 1)
    cfg = Word2VecConfig(model="cbow", min_count=1, epochs=2, dim=8, sample=0, device="torch", workers=1)
    stats = train_on_ids_torch(vocab, corpus, cfg, progress=False)[1]
    assert stats["effective_words"] == stats["words"] == 2 * corpus.n_words
