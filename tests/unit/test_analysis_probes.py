"""Probes, Hewitt & Liang's control tasks, Hewitt & Manning's structural probe and Tenney's
layer statistics, on synthetic data whose answers are known."""

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from ptmkit.analysis import controls
from ptmkit.analysis import trees as T
from ptmkit.analysis.layer_weights import center_of_gravity, cumulative_scores, expected_layer, train_mix_probe
from ptmkit.analysis.probes import ProbeConfig, train_probe
from ptmkit.analysis.structural import train_structural
from ptmkit.errors import PtmError

torch.set_num_threads(1)


def _separable(n, d=8, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d)) * 4
    y = rng.integers(k, size=n)
    return (centres[y] + rng.standard_normal((n, d))).astype(np.float32), y


def test_linear_and_mlp_probes_learn_a_separable_task_and_not_noise():
    x, y = _separable(600)
    for hidden in (0, 32):
        cfg = ProbeConfig(hidden=hidden, epochs=15, lr=1e-2)
        assert train_probe(x[:400], y[:400], x[400:], y[400:], 3, cfg)["accuracy"] > 0.97
    noise = np.random.default_rng(1).integers(3, size=600)
    acc = train_probe(x[:400], noise[:400], x[400:], noise[400:], 3, ProbeConfig(epochs=15, lr=1e-2))["accuracy"]
    assert acc < 0.5  # chance is 1/3
    first = train_probe(x[:400], y[:400], x[400:], y[400:], 3)
    assert train_probe(x[:400], y[:400], x[400:], y[400:], 3) == first  # seeded: the same numbers


def test_control_labels_follow_hewitt_and_liang():
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(400)]
    sents = [list(rng.choice(vocab, size=8)) for _ in range(300)]
    tags = [["N" if rng.random() < 0.7 else "V" for _ in s] for s in sents]
    ctl = controls.control_labels(sents, tags, seed=0)
    assert set(ctl) == set(vocab)  # one label per word type, whatever its contexts
    share = Counter(ctl.values())["N"] / len(ctl)
    emp = Counter(t for s in tags for t in s)["N"] / sum(len(s) for s in tags)
    assert abs(share - emp) < 0.07  # drawn from the empirical label distribution
    assert controls.control_labels(sents, tags, seed=0) == ctl
    beh = controls.control_behaviours(sents, seed=0)
    assert set(beh.values()) == set(controls.BEHAVIOURS)
    words = ["w1", "w2", "w3", "w4"]
    heads = controls.control_heads(words, beh)
    expect = {"self": None, "first": 0, "last": 3}
    assert [h for h in heads] == [i if expect[beh[w]] is None else expect[beh[w]] for i, w in enumerate(words)]
    side, rank = {"w1": 0, "w2": 1, "w3": 0, "w4": 1}, {"w1": 5, "w2": 1, "w3": 9, "w4": 2}
    # w3 ranks highest: the root; the last word the anchor, under it; w1 (bit 0) -> root, w2 (bit 1) -> anchor
    assert controls.control_tree(words, side, rank).tolist() == [2, 3, -1, 2]
    assert controls.control_tree(["w2", "w1", "w3"], side, rank).tolist() == [2, 2, -1]  # the root last: anchor first
    assert controls.control_tree(["w3", "w1", "w3"], side, rank).tolist() == [-1, 0, 0]  # ties: the first is the root
    sides, ranks = controls.control_sides(sents), controls.control_ranks(sents)
    assert sorted(ranks.values()) == list(range(len(vocab)))
    roots = Counter(int(np.flatnonzero(controls.control_tree(s, sides, ranks) == -1)[0]) for s in sents)
    assert len(roots) == 8 and max(roots.values()) < 0.3 * len(sents)  # the root is no position
    for s in sents[:20]:
        T.check_tree(controls.control_tree(s, sides, ranks))
    assert controls.selectivity(0.9, 0.6) == pytest.approx(0.3)


def test_tree_distances_depths_and_spanning_tree():
    heads = [1, -1, 1, 4, 2]
    assert T.depths(heads).tolist() == [1, 0, 1, 3, 2]
    d = T.distances(heads)
    assert d[0, 3] == 4 and d[3, 4] == 1 and d[0, 2] == 2 and (d == d.T).all()
    assert T.min_spanning_edges(d.astype(float)) == {frozenset(e) for e in [(0, 1), (1, 2), (2, 4), (3, 4)]}
    with pytest.raises(PtmError, match="one root"):
        T.check_tree([1, 0])
    with pytest.raises(PtmError, match="cycle"):
        T.check_tree([-1, 2, 1])
    perfect = T.distance_scores([d.astype(float)] * 2, [heads] * 2)
    assert perfect["uuas"] == 1.0
    depth = T.depth_scores([T.depths(heads).astype(float)], [heads])
    assert depth["root_accuracy"] == 1.0 and depth["nspr"] == pytest.approx(1.0)


def _random_tree(rng, n):
    heads = [-1] + [int(rng.integers(i)) for i in range(1, n)]  # each word attaches to an earlier one
    perm = rng.permutation(n)  # shuffle word order
    inv = np.argsort(perm)
    return [(-1 if heads[perm[i]] < 0 else int(inv[heads[perm[i]]])) for i in range(n)]


def _planted(rng, trees, q, noise=0.01):
    """h_i = Q p_i with p_i the sum of one-hot edge vectors on i's path to the root (dimension = the
    word index of the edge's dependent): ||p_i - p_j||² is exactly the tree distance."""
    out = []
    for heads in trees:
        n = len(heads)
        p = np.zeros((n, q.shape[1]))
        for i in range(n):
            j = i
            while heads[j] != -1:
                p[i, j] = 1.0
                j = heads[j]
        out.append((p @ q.T + noise * rng.standard_normal((n, q.shape[0]))).astype(np.float32))
    return out


def test_the_structural_probe_recovers_a_planted_tree_metric():
    rng = np.random.default_rng(3)
    trees = [_random_tree(rng, int(rng.integers(5, 12))) for _ in range(160)]
    q = rng.standard_normal((24, 12)) / np.sqrt(12)
    vecs = _planted(rng, trees, q)
    cfg = ProbeConfig(epochs=40, lr=1e-2, batch_size=20)
    dist = train_structural("distance", vecs[:120], trees[:120], vecs[120:], trees[120:], rank=16, cfg=cfg)
    assert dist["uuas"] > 0.95 and dist["dspr"] > 0.9
    # the same words in random trees: nothing to find
    shuffled = [_random_tree(rng, len(t)) for t in trees]
    noise = train_structural("distance", vecs[:120], shuffled[:120], vecs[120:], shuffled[120:], rank=16, cfg=cfg)
    assert noise["uuas"] < dist["uuas"] - 0.3


def test_the_depth_probe_finds_the_root():
    rng = np.random.default_rng(4)
    trees = [_random_tree(rng, int(rng.integers(5, 12))) for _ in range(160)]
    q = rng.standard_normal((24, 12)) / np.sqrt(12)
    vecs = _planted(rng, trees, q)
    # depth = ||p_i||²: a linear map of p recovers it exactly
    out = train_structural("depth", vecs[:120], trees[:120], vecs[120:], trees[120:], rank=16,
                           cfg=ProbeConfig(epochs=40, lr=1e-2, batch_size=20))
    assert out["root_accuracy"] > 0.9 and out["nspr"] > 0.9


def test_expected_layer_and_center_of_gravity():
    assert expected_layer([0, 0, 1]) == 2.0
    assert expected_layer([0.25, 0.5, 0.25]) == 1.0
    assert center_of_gravity([0.1, 0.9, 0.9, 0.9]) == pytest.approx(1.0)  # all gain at layer 1
    assert center_of_gravity([0.1, 0.1, 0.1, 0.9]) == pytest.approx(3.0)
    assert center_of_gravity([0.1, 0.5, 0.5, 0.9]) == pytest.approx(2.0)  # half at 1, half at 3


def test_the_mix_probe_weights_the_informative_layer():
    x, y = _separable(600, d=6)
    rng = np.random.default_rng(5)
    layers = np.stack([rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(x.shape).astype(np.float32),
                       x], 1)  # [N, 3, d]: only layer 2 knows the label
    cfg = ProbeConfig(epochs=30, lr=2e-2, batch_size=64)
    mix = train_mix_probe(layers[:400], y[:400], layers[400:], y[400:], 3, cfg)
    assert mix["accuracy"] > 0.95 and mix["expected_layer"] > 1.5
    cum = cumulative_scores(layers[:400], y[:400], layers[400:], y[400:], 3, cfg)
    assert cum["scores"][2] > 0.95 and max(cum["scores"][:2]) < 0.6
    assert cum["center_of_gravity"] == pytest.approx(2.0, abs=0.2)


def test_spearman_is_scipys_with_ties():
    """The tree-distance correlation is Spearman's rho on tie-averaged ranks (computed in numpy,
    so that reading a treebank does not import scipy.stats)."""
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(3, 30))
        a, b = rng.integers(0, 5, n).astype(float), rng.integers(0, 7, n) + rng.random(n) * (rng.random() < 0.5)
        if np.ptp(a) and np.ptp(b):
            assert T._spearman(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
