"""Ethayarajh's contextuality statistics and Clark et al.'s attention statistics on synthetic
vectors and attention maps whose answers are known analytically, and against float64 brute force."""

from collections import Counter
from itertools import permutations

import numpy as np
import pytest

from ptmkit.analysis import contextuality as C
from ptmkit.analysis.attention_stats import AttentionStream, word_attention
from ptmkit.analysis.contextuality_stream import ContextualityStream, select_words
from ptmkit.errors import PtmError


def _cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_isotropic_gaussian_has_no_anisotropy():
    x = np.random.default_rng(0).standard_normal((1500, 64))
    assert abs(C.anisotropy(x)) < 0.01
    # and a cone (every vector shares a common direction) has a large one
    assert C.anisotropy(x + 4.0) > 0.8


def test_identical_vectors_have_self_similarity_and_mev_one():
    v = np.random.default_rng(1).standard_normal(32)
    x = np.tile(v, (7, 1))
    assert C.self_similarity(x) == pytest.approx(1.0)
    assert C.mev(x) == 1.0
    assert np.allclose(C.first_pc(x), v / np.linalg.norm(v))
    line = np.outer(np.arange(1, 8), v) + 3.0  # occurrences varying along one direction only
    assert C.mev(line) == pytest.approx(1.0)
    assert np.allclose(C.first_pc(line), v / np.linalg.norm(v))


def test_statistics_match_brute_force():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 5)) + 0.5
    pairs = [_cos(x[i], x[j]) for i, j in permutations(range(9), 2)]
    assert C.self_similarity(x) == pytest.approx(np.mean(pairs), abs=1e-12)
    centre = x.mean(0)
    assert C.intra_sentence_similarity(x) == pytest.approx(np.mean([_cos(r, centre) for r in x]), abs=1e-12)
    cov = np.cov(x.T)  # scikit-learn PCA's explained_variance_ratio_[0]: the covariance's top eigenvalue share
    eig = np.linalg.eigvalsh(cov)
    assert C.mev(x) == pytest.approx(eig[-1] / eig.sum(), abs=1e-12)
    pc = C.first_pc(x)
    top = np.linalg.eigh(cov)[1][:, -1]
    assert abs(pc @ top) == pytest.approx(1.0) and pc @ x.sum(0) > 0
    adj = C.adjusted({"self_similarity": [0.5], "intra_sentence": [0.4], "mev": [0.3]}, [0.1], [0.05])
    assert [adj[k][0] for k in ("self_similarity", "intra_sentence", "mev")] == pytest.approx([0.4, 0.3, 0.25])


def test_too_few_occurrences_for_self_similarity():
    with pytest.raises(ValueError, match="at least 2"):
        C.self_similarity(np.ones((1, 3)))


def _feed(stream, sentences, vectors):
    for k, (words, layers) in enumerate(zip(sentences, vectors)):
        stream.add(k, words, layers)


def test_stream_equals_the_batch_statistics(tmp_path):
    rng = np.random.default_rng(3)
    vocab = ["a", "b", "c", "d"]
    sentences = [list(rng.choice(vocab, size=rng.integers(2, 6))) for _ in range(40)]
    L, d = 3, 6
    vectors = [rng.standard_normal((L, len(s), d)).astype(np.float32) + 1.0 for s in sentences]
    counts = Counter(w for s in sentences for w in s)
    words = select_words(counts)
    stream = ContextualityStream(words, L, d, len(sentences), tmp_path, max_occurrences=1000, baseline_samples=10)
    _feed(stream, sentences, vectors)
    out = stream.result()
    for layer in range(L):
        occ = {w: np.array([v[layer, j] for s, v in zip(sentences, vectors) for j, x in enumerate(s) if x == w])
               for w in words}
        ref_self = np.mean([C.self_similarity(o) for o in occ.values()])
        ref_mev = np.mean([C.mev(o.astype(np.float16)) for o in occ.values()])
        ref_intra = np.mean([C.intra_sentence_similarity(v[layer]) for v in vectors])
        assert out["self_similarity"][layer] == pytest.approx(ref_self, abs=1e-6)
        assert out["mev"][layer] == pytest.approx(ref_mev, abs=1e-6)
        assert out["intra_sentence"][layer] == pytest.approx(ref_intra, abs=1e-6)
    assert out["baseline_samples"] == 10
    # the same sentences fed again give the same numbers (the baseline's draw is per sentence index)
    again = ContextualityStream(words, L, d, len(sentences), tmp_path / "..", max_occurrences=1000, baseline_samples=10)
    _feed(again, sentences, vectors)
    assert again.result()["anisotropy"] == out["anisotropy"]
    names, pcs = stream.static_vectors(1)
    assert names == words and pcs.shape == (len(words), d)


def test_a_context_free_word_has_self_similarity_one(tmp_path):
    rng = np.random.default_rng(4)
    fixed = rng.standard_normal(8).astype(np.float32)
    sentences = [["x", "y"] for _ in range(6)]
    vectors = []
    for _ in sentences:
        v = rng.standard_normal((2, 2, 8)).astype(np.float32)
        v[:, 0] = fixed  # "x" never changes with its context
        vectors.append(v)
    stream = ContextualityStream(["x", "y"], 2, 8, 6, tmp_path)
    _feed(stream, sentences, vectors)
    per_word = stream.result()["per_word"]
    assert per_word["x"] == pytest.approx([1.0, 1.0], abs=1e-4)
    assert per_word["y"][0] < 0.9


def test_no_word_with_five_occurrences_is_refused_with_the_count():
    counts = Counter({"the": 4, "cat": 2, "sat": 1})
    with pytest.raises(PtmError, match=r"at least 5 times \(7 words, 3 distinct; the most frequent, 'the', occurs 4"):
        select_words(counts)
    assert select_words(Counter({"b": 5, "a": 5, "c": 9})) == ["c", "a", "b"]


# -- attention -----------------------------------------------------------------------------------------
def test_uniform_attention_statistics():
    T = 5
    attn = np.full((1, 1, T, T), 1.0 / T)
    is_cls = np.array([1, 0, 0, 0, 0], bool)
    is_sep = np.array([0, 0, 0, 0, 1], bool)
    is_punct = np.array([0, 0, 0, 1, 0], bool)
    s = AttentionStream(1, 1)
    s.add(attn, is_cls, is_sep, is_punct)
    st = s.result()["stats"]
    assert st["entropy"][0][0] == pytest.approx(np.log(T))
    for key in ("cls", "sep", "punct", "self"):
        assert st[key][0][0] == pytest.approx(1 / T)
    assert st["prev"][0][0] == pytest.approx((T - 1) / T / T)


def test_a_previous_token_head_and_a_syntactic_head_are_found():
    W = 6
    heads = [1, -1, 1, 4, 1, 4]  # a tree over 6 words, one token each
    rels = ["nsubj", "root", "dobj", "det", "obl", "punct"]
    attn = np.zeros((1, 3, W, W))
    attn[0, 0, np.arange(W), np.maximum(np.arange(W) - 1, 0)] = 1.0  # previous token
    for i, h in enumerate(heads):
        attn[0, 1, i, h if h >= 0 else i] = 1.0  # the syntactic head
    attn[0, 2] = 1.0 / W
    s = AttentionStream(1, 3)
    no = np.zeros(W, bool)
    s.add(attn, no, no, no, word_of=np.arange(W), heads=heads, relations=rels)
    out = s.result()
    assert out["stats"]["prev"][0][0] == pytest.approx((W - 1) / W)
    for rel in ("nsubj", "dobj", "det", "obl", "punct"):
        assert out["relations"][rel]["accuracy"][0][1] == 1.0
    for rel in ("det", "obl"):  # where the previous-token head is wrong, head 1 is the best
        assert out["relations"][rel]["best_head"] == [0, 1]
        assert out["relations"][rel]["accuracy"][0][0] == 0.0
    # det: word 3 -> head 4, one to the right: the offset baseline +1 is exact
    assert out["relations"]["det"]["baseline_offset"] == 1
    assert out["relations"]["det"]["baseline_accuracy"] == 1.0
    assert "root" not in out["relations"]


def test_word_attention_sums_columns_and_averages_rows():
    # tokens: [CLS] a b# c [SEP]; words: 0 = (a, b#), 1 = c
    rng = np.random.default_rng(5)
    a = rng.random((5, 5))
    a /= a.sum(1, keepdims=True)
    word_of = np.array([-1, 0, 0, 1, -1])
    wa = word_attention(a, word_of, 2)
    assert wa[0, 1] == pytest.approx((a[1, 3] + a[2, 3]) / 2)
    assert wa[1, 0] == pytest.approx(a[3, 1] + a[3, 2])
    assert wa[0, 0] == pytest.approx((a[1, 1] + a[1, 2] + a[2, 1] + a[2, 2]) / 2)
