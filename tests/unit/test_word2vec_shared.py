"""word2vec with negatives shared across a window (kernel=shared_negatives): the dense block update
against a float64 NumPy reference, determinism, the config key, and learning on planted structure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.static.kernels.w2v import _EXP_SCALE, MAX_EXP, exp_table
from ptmkit.static.kernels.w2v_shared import cbow_batch, sg_window
from ptmkit.static.run import resolve_config, run_static
from ptmkit.static.vocab import load_corpus
from ptmkit.static.word2vec import Word2VecConfig, train_on_ids

V, D, W, K = 12, 8, 3, 4
ALPHA = 0.05


def _tables(seed):
    """syn0, syn1neg float32 [V, D]; one output row is blown up so some scores pass ±MAX_EXP."""
    rng = np.random.default_rng(seed)
    syn0 = rng.normal(0.0, 0.6, (V, D)).astype(np.float32)
    syn1neg = rng.normal(0.0, 0.6, (V, D)).astype(np.float32)
    syn1neg[7] *= 40.0
    return syn0, syn1neg


def _coef(f: np.ndarray, label: np.ndarray) -> np.ndarray:
    """word2vec's coefficient (label - σ(f))·alpha in float64, σ read from the same table."""
    tab = exp_table().astype(np.float64)
    idx = np.clip(((f + MAX_EXP) * _EXP_SCALE).astype(np.int64), 0, tab.size - 1)
    sig = np.where(f > MAX_EXP, 1.0, np.where(f < -MAX_EXP, 0.0, tab[idx]))
    return (label - sig) * ALPHA


def _reference(syn0, syn1neg, h, in_rows, in_scale, outs, true_col, n_pos):
    """The minibatch update in float64: rows h [n, D] (built from syn0) against syn1neg[outs];
    row i's positive is column true_col[i], columns n_pos.. are negatives (skipped where they equal
    row i's true word).  in_rows[i] lists the syn0 rows that receive in_scale[i] * dH[i]."""
    s0, s1 = syn0.astype(np.float64), syn1neg.astype(np.float64)
    o = s1[outs]
    f = h @ o.T
    n, m = f.shape
    true_word = outs[true_col]
    scored = np.zeros((n, m), bool)
    scored[np.arange(n), true_col] = True
    scored[:, n_pos:] = outs[None, n_pos:] != true_word[:, None]
    # the table index must not sit on a bin edge, or float32 rounding could pick the next bin
    frac = (f + MAX_EXP) * _EXP_SCALE
    inside = scored & (np.abs(f) < MAX_EXP)
    assert np.all(np.abs(frac[inside] - np.round(frac[inside])) > 1e-3)
    assert (scored & (np.abs(f) > MAX_EXP)).any(), "the test should cover saturated scores"
    label = np.zeros((n, m))
    label[np.arange(n), true_col] = 1.0
    g = np.where(scored, _coef(f, label), 0.0)
    dh = g @ o
    np.add.at(s1, outs, g.T @ h)
    for i in range(n):
        for w in in_rows[i]:
            s0[w] += in_scale[i] * dh[i]
    return s0, s1


@pytest.mark.parametrize("seed", [0, 1])
def test_skipgram_window_matches_float64_reference(seed):
    syn0, syn1neg = _tables(seed)
    buf = np.array([3, 5, 9, 5, 2, 7, 1], dtype=np.int32)  # context word 5 twice
    start, end, centre = 1, 6, 2  # target 9, inputs 5, 5, 2, 7
    negs = np.array([7, 9, 4, 4], dtype=np.int64)  # the target itself (skipped) and a repeated negative
    ins = [5, 5, 2, 7]
    h = syn0[ins].astype(np.float64)
    outs = np.concatenate([[9], negs])
    ref0, ref1 = _reference(syn0, syn1neg, h, [[w] for w in ins], np.ones(4), outs, np.zeros(4, np.int64), 1)
    scratch = dict(
        ins=np.empty(2 * W, np.int64), outs=np.empty(1 + K, np.int64), pos_of=np.empty(2 * W, np.int64),
        h=np.empty((2 * W, D), np.float32), dh=np.empty((2 * W, D), np.float32), g=np.empty((2 * W, 1 + K), np.float32),
    )  # fmt: skip
    n = sg_window(syn0, syn1neg, buf, start, end, centre, negs, K, ALPHA, exp_table(), *scratch.values())
    assert n == 4
    np.testing.assert_allclose(syn0, ref0, rtol=1e-5, atol=1e-6)  # every row: untouched ones unchanged
    np.testing.assert_allclose(syn1neg, ref1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cbow_mean", [True, False])
def test_cbow_batch_matches_float64_reference(cbow_mean):
    syn0, syn1neg = _tables(2)
    buf = np.array([3, 5, 9, 5, 2, 7, 1, 9], dtype=np.int32)
    # four targets with reduced windows; targets 5 (rows 0, 2) and 9 (row 1) repeat; row 3 has no context
    centres = np.array([1, 2, 3, 6], dtype=np.int64)
    starts = np.array([0, 0, 2, 6], dtype=np.int64)
    ends = np.array([4, 5, 6, 7], dtype=np.int64)
    negs = np.array([7, 5, 0, 0], dtype=np.int64)  # 5 is row 0's and row 2's true word
    ctx = [[int(buf[j]) for j in range(starts[r], ends[r]) if j != centres[r]] for r in range(3)]
    h = np.stack([syn0[c].astype(np.float64).sum(0) / (len(c) if cbow_mean else 1) for c in ctx])
    scale = np.array([1.0 if cbow_mean else 1.0 / len(c) for c in ctx])
    outs = np.concatenate([buf[centres[:3]].astype(np.int64), negs])
    ref0, ref1 = _reference(syn0, syn1neg, h, ctx, scale, outs, np.arange(3), 3)
    rows, cols = 2 * W, 2 * W + K
    n = cbow_batch(
        syn0, syn1neg, buf, centres.copy(), starts.copy(), ends.copy(), 4, negs, K, ALPHA, cbow_mean, exp_table(),
        np.empty(cols, np.int64), np.empty(rows, np.int64), np.empty(rows, np.float32),
        np.empty((rows, D), np.float32), np.empty((rows, D), np.float32), np.empty((rows, cols), np.float32),
    )  # fmt: skip
    assert n == 3
    np.testing.assert_allclose(syn0, ref0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(syn1neg, ref1, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- whole runs


def _clusters(n_sent=1500, n_clusters=2, per_cluster=10, sent_len=8, seed=0):
    """Sentences whose words all come from one cluster: words co-occur only within their cluster."""
    rng = np.random.default_rng(seed)
    words = [[f"c{c}w{i}" for i in range(per_cluster)] for c in range(n_clusters)]
    cl = rng.integers(0, n_clusters, n_sent)
    picks = rng.integers(0, per_cluster, (n_sent, sent_len))
    return [[words[c][i] for i in row] for c, row in zip(cl, picks)]


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_seeded_single_thread_run_is_deterministic(model):
    vocab, corpus = load_corpus(_clusters(n_sent=600), 1)
    cfg = Word2VecConfig(model=model, kernel="shared_negatives", dim=16, epochs=2, min_count=1, workers=1, chunk_words=500)
    a, sa = train_on_ids(vocab, corpus, cfg, progress=False)
    b, sb = train_on_ids(vocab, corpus, cfg, progress=False)
    np.testing.assert_array_equal(a, b)
    assert sa["effective_words"] == sb["effective_words"] > 0
    exact, _ = train_on_ids(vocab, corpus, Word2VecConfig(**{**cfg.__dict__, "kernel": "exact"}), progress=False)
    assert not np.array_equal(a, exact)  # the key does select another update
    wider, _ = train_on_ids(vocab, corpus, Word2VecConfig(**{**cfg.__dict__, "cbow_batch": 5}), progress=False)
    assert np.array_equal(a, wider) == (model == "skipgram")  # cbow_batch is CBOW's only


@pytest.mark.parametrize(
    "model,kernel,cbow_batch",
    [("skipgram", "exact", 2), ("skipgram", "shared_negatives", 2), ("cbow", "exact", 2),
     ("cbow", "shared_negatives", 1), ("cbow", "shared_negatives", 2), ("cbow", "shared_negatives", 6)],
)  # fmt: skip
def test_learns_planted_clusters(model, kernel, cbow_batch):
    sents = _clusters(n_clusters=3)
    vocab, corpus = load_corpus(sents, 1)
    cfg = Word2VecConfig(model=model, kernel=kernel, cbow_batch=cbow_batch, dim=20, window=3, epochs=3, min_count=1,
                         sample=0, workers=1)  # fmt: skip
    vecs, _ = train_on_ids(vocab, corpus, cfg, progress=False)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    sim = unit @ unit.T
    cluster = np.array([w.split("w")[0] for w in vocab.words])
    same = cluster[:, None] == cluster[None, :]
    off_diag = ~np.eye(len(vocab), dtype=bool)
    within, across = sim[same & off_diag].mean(), sim[~same].mean()
    assert within > across + 0.3, (within, across)
    # every word's nearest neighbour is in its own cluster
    nearest = np.where(off_diag, sim, -np.inf).argmax(1)
    assert (cluster[nearest] == cluster).all()


def test_kernel_key_through_presets_and_overrides(tmp_path):
    model, cfg = resolve_config("word2vec-sg-ns", ["kernel=shared_negatives", "dim=12"])
    assert model == "word2vec" and cfg.kernel == "shared_negatives" and cfg.dim == 12
    assert resolve_config("word2vec-sg-ns")[1].kernel == "exact"
    with pytest.raises(PtmError, match="kernel"):
        resolve_config("word2vec", ["kernel=shared"])
    with pytest.raises(PtmError, match="loss='ns'"):
        resolve_config("word2vec", ["kernel=shared_negatives", "loss=hs"])
    with pytest.raises(PtmError, match="device='cpu'"):
        resolve_config("word2vec", ["kernel=shared_negatives", "device=torch"])
    with pytest.raises(PtmError, match="cbow_batch"):
        resolve_config("word2vec-cbow-ns", ["kernel=shared_negatives", "cbow_batch=0"])
    data = tmp_path / "text.txt"
    data.write_text("\n".join(" ".join(s) for s in _clusters(n_sent=200)) + "\n")
    wv = run_static("word2vec", [data], tmp_path / "out", ["kernel=shared_negatives", "model=cbow", "dim=8", "min_count=1",
                                                           "epochs=1", "workers=1", "cache=false"], progress=False)  # fmt: skip


    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["kernel"] == "shared_negatives" and saved["model"] == "cbow"
    assert len(wv) == 20 and np.isfinite(wv.vectors).all()


# ----------------------------------------------------------------------------- Skip-gram HS, shared path


def _hs_reference(syn0, syn1, codes, points, length, ins, target):
    """The window's HS block in float64: rows syn0[ins] against the nodes of target's path."""
    s0, s1 = syn0.astype(np.float64), syn1.astype(np.float64)
    nodes = points[target, :length]
    h, p = s0[ins], s1[nodes]
    f = h @ p.T
    frac = (f + MAX_EXP) * _EXP_SCALE
    inside = np.abs(f) < MAX_EXP
    assert np.all(np.abs(frac[inside] - np.round(frac[inside])) > 1e-3)
    assert (~inside).any() and inside.any(), "the test should cover skipped and scored nodes"
    tab = exp_table().astype(np.float64)
    sig = tab[np.clip(frac.astype(np.int64), 0, tab.size - 1)]
    g = np.where(inside, (1.0 - codes[target, :length][None, :] - sig) * ALPHA, 0.0)  # word2vec.c skips |f| ≥ 6
    dh = g @ p
    np.add.at(s1, nodes, g.T @ h)
    np.add.at(s0, ins, dh)
    return s0, s1


@pytest.mark.parametrize("seed", [0, 3])
def test_skipgram_hs_window_matches_float64_reference(seed):
    from ptmkit.static.huffman import build_huffman
    from ptmkit.static.kernels.w2v_shared import sg_hs_window

    rng = np.random.default_rng(seed)
    tree = build_huffman(np.array([40, 30, 20, 12, 9, 7, 5, 4, 3, 2, 2, 1]))
    syn0 = rng.normal(0.0, 0.6, (V, D)).astype(np.float32)
    syn1 = rng.normal(0.0, 0.6, (V - 1, D)).astype(np.float32)
    target = 9  # a rare word: a long path
    syn1[tree.points[target, 0]] *= 40.0  # one node saturates (skipped, as in word2vec.c)
    buf = np.array([3, 5, 9, 5, 2, 7, 1], dtype=np.int32)  # context word 5 twice
    ins = [5, 5, 2, 7]
    ref0, ref1 = _hs_reference(syn0, syn1, tree.codes, tree.points, tree.lengths[target], ins, target)
    width = tree.points.shape[1]
    n = sg_hs_window(syn0, syn1, tree.codes, tree.points, tree.lengths, buf, 1, 6, 2, ALPHA, exp_table(),
                     np.empty(2 * W, np.int64), np.empty((2 * W, D), np.float32), np.empty((2 * W, D), np.float32),
                     np.empty((2 * W, width), np.float32))  # fmt: skip
    assert n == 4
    np.testing.assert_allclose(syn0, ref0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(syn1, ref1, rtol=1e-5, atol=1e-6)


def test_shared_path_runs_are_deterministic_and_learn():
    vocab, corpus = load_corpus(_clusters(n_clusters=3), 1)
    cfg = Word2VecConfig(model="skipgram", loss="hs", kernel="shared_path", dim=20, window=3, epochs=3, min_count=1,
                         sample=0, workers=1, chunk_words=2000)  # fmt: skip
    a, _ = train_on_ids(vocab, corpus, cfg, progress=False)
    b, _ = train_on_ids(vocab, corpus, cfg, progress=False)
    np.testing.assert_array_equal(a, b)
    exact, _ = train_on_ids(vocab, corpus, Word2VecConfig(**{**cfg.__dict__, "kernel": "exact"}), progress=False)
    assert not np.array_equal(a, exact)
    unit = a / np.linalg.norm(a, axis=1, keepdims=True)
    sim = unit @ unit.T
    cluster = np.array([w.split("w")[0] for w in vocab.words])
    off_diag = ~np.eye(len(vocab), dtype=bool)
    nearest = np.where(off_diag, sim, -np.inf).argmax(1)
    assert (cluster[nearest] == cluster).all()
    with pytest.raises(ValueError, match="loss='hs'"):
        Word2VecConfig(kernel="shared_path")
    with pytest.raises(ValueError, match="model='skipgram'"):
        Word2VecConfig(model="cbow", loss="hs", kernel="shared_path")
