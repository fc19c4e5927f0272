"""Clark et al.'s attention-only dependency probe and the two directions of per-head accuracy, on
planted attention whose answers are known."""

import numpy as np
import pytest
import torch

from ptmkit.analysis.attention_probe import (
    AttentionFeatures,
    right_branching,
    sentence_features,
    train_attention_probe,
    uas,
)
from ptmkit.analysis.attention_stats import AttentionStream, word_attention
from ptmkit.errors import PtmError

torch.set_num_threads(1)


def _tree(rng, W):
    """A random tree over W words: heads [W], -1 at the root."""
    order = rng.permutation(W)
    heads = np.full(W, -1)
    for k in range(1, W):
        heads[order[k]] = order[rng.integers(k)]
    return heads


def _planted(rng, heads, layers=2, per_layer=3, syntactic=(1, 2), transpose=False, noise=1.0):
    """Token attention [layers, heads, T, T] over [CLS] w_0 .. w_{W-1} [SEP] (one token per word):
    random rows, except the planted head, whose dependents attend to their heads and whose root
    attends to [CLS] (or, transposed, whose heads attend to their one dependent and whose [CLS]
    attends to the root)."""
    W = len(heads)
    T = W + 2
    attn = rng.dirichlet(np.full(T, noise), size=(layers, per_layer, T))
    l, h = syntactic
    planted = np.full((T, T), 1e-3)
    for i, hd in enumerate(heads):
        if transpose:  # the head attends to its dependent; [CLS] attends to the root
            planted[hd + 1 if hd >= 0 else 0, i + 1] = 1.0
        else:
            planted[i + 1, (hd + 1) if hd >= 0 else 0] = 1.0
    attn[l, h] = planted / planted.sum(-1, keepdims=True)
    return attn, np.array([-1, *range(W), -1])


def test_features_are_word_attention_in_both_directions_with_root_slots():
    rng = np.random.default_rng(0)
    # tokens: [CLS] a b# c [SEP] -> words 0 = (a, b#), 1 = c
    attn = rng.dirichlet(np.ones(5), size=(2, 3, 5))
    word_of = np.array([-1, 0, 0, 1, -1])
    f = sentence_features(attn, word_of, 2)
    assert f.maps.shape == (12, 2, 2) and f.root.shape == (2, 12, 2)
    wa = word_attention(attn, word_of, 2).reshape(6, 2, 2)
    np.testing.assert_allclose(f.maps[:6], wa, rtol=1e-6)
    np.testing.assert_allclose(f.maps[6:], wa.transpose(0, 2, 1), rtol=1e-6)
    a = attn[1, 2]  # map 5
    assert f.root[0, 5, 0] == pytest.approx((a[1, 0] + a[2, 0]) / 2)  # word 0 -> [CLS], averaged over its pieces
    assert f.root[1, 5, 1] == pytest.approx(a[3, 4])  # word 1 -> [SEP]
    assert f.root[0, 11, 0] == pytest.approx(a[0, 1] + a[0, 2])  # [CLS] -> word 0, summed over its pieces
    # a causal framing has no [CLS]: the start slot is zero
    causal = sentence_features(attn[..., 1:, 1:] / attn[..., 1:, 1:].sum(-1, keepdims=True), word_of[1:], 2)
    assert not causal.root[0].any() and causal.root[1].any()


@pytest.mark.parametrize("transpose", [False, True])
def test_the_probe_finds_a_planted_syntactic_head(transpose):
    rng = np.random.default_rng(1)
    trees = [_tree(rng, int(rng.integers(4, 12))) for _ in range(140)]
    if transpose:  # a head attends to one dependent each: chains keep that to one dependent per head
        trees = [np.append(np.arange(1, len(t)), -1) if k % 2 else np.append(-1, np.arange(len(t) - 1))
                 for k, t in enumerate(trees)]
    feats = [sentence_features(*_planted(rng, t, transpose=transpose), len(t)) for t in trees]
    out = train_attention_probe(feats[:100], trees[:100], feats[100:], trees[100:])
    assert out["uas"] > 0.97
    planted = 1 * 3 + 2 + (6 if transpose else 0)  # layer 1, head 2; the transposed maps follow the others
    assert int(np.argmax(out["weights"])) == planted
    noise = [sentence_features(np.random.default_rng(k).dirichlet(np.ones(len(t) + 2), size=(2, 3, len(t) + 2)),
                               np.array([-1, *range(len(t)), -1]), len(t)) for k, t in enumerate(trees)]
    assert train_attention_probe(noise[:100], trees[:100], noise[100:], trees[100:])["uas"] < 0.5


def test_uas_leaves_punctuation_out_and_right_branching_is_the_next_word():
    heads = [np.array([1, -1, 1, 2])]
    assert right_branching(heads)[0].tolist() == [1, 2, 3, -1]
    assert uas(right_branching(heads), heads) == pytest.approx(1 / 4)  # only word 0 -> 1
    assert uas([np.array([1, -1, 1, 0])], heads, [np.array([0, 0, 0, 1], bool)]) == 1.0


def test_probe_refuses_no_sentences_and_features_that_do_not_match_the_trees():
    f = AttentionFeatures(np.zeros((4, 3, 3), np.float32), np.zeros((2, 4, 3), np.float32))
    with pytest.raises(PtmError, match="needs training and test sentences"):
        train_attention_probe([], [], [f], [np.array([1, -1, 1])])
    with pytest.raises(PtmError, match="differ in sentence length"):
        train_attention_probe([f], [np.array([1, -1])], [f], [np.array([1, -1, 1])])
    with pytest.raises(PtmError, match="without words"):
        sentence_features(np.ones((1, 1, 2, 2)) / 2, np.array([-1, -1]), 0)


def test_head_accuracy_in_both_directions():
    """A head whose heads attend to their (single) dependent is found by the head<-dep direction only."""
    W = 6
    heads = [1, 2, 3, 4, 5, -1]  # a chain: each word's head is the next one
    rels = ["amod", "det", "amod", "det", "nsubj", "root"]
    attn = np.full((1, 2, W, W), 1e-3)
    for i, h in enumerate(heads):
        if h >= 0:
            attn[0, 0, i, h] = 1.0  # dep -> head
            attn[0, 1, h, i] = 1.0  # the head attends to its dependent
    attn /= attn.sum(-1, keepdims=True)
    s = AttentionStream(1, 2)
    no = np.zeros(W, bool)
    s.add(attn, no, no, no, word_of=np.arange(W), heads=heads, relations=rels)
    out = s.result()["relations"]
    for rel in ("amod", "det", "nsubj"):
        assert out[rel]["accuracy"][0][0] == 1.0 and out[rel]["accuracy_head_to_dep"][0][1] == 1.0
        assert out[rel]["best_head"] == [0, 0] and out[rel]["best_direction"] == "dep->head"  # dep->head wins ties
    attn[0, 0] = attn[0, 0, :, ::-1]  # break the dep->head head: now the transposed direction is the best
    s = AttentionStream(1, 2)
    s.add(attn, no, no, no, word_of=np.arange(W), heads=heads, relations=rels)
    out = s.result()["relations"]
    assert out["det"]["best_head"] == [0, 1] and out["det"]["best_direction"] == "head<-dep"
    assert out["det"]["best_accuracy"] == 1.0
