"""Interpolated modified Kneser-Ney trigram: formulas by hand, normalisation, perplexity."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.static.kneser_ney import KneserNeyTrigram, modified_kn_discounts, pad_sentences


def test_discounts_follow_chen_goodman():
    counts = np.array([1] * 10 + [2] * 5 + [3] * 3 + [4] * 2 + [7])
    n1, n2, n3, n4 = 10, 5, 3, 2
    y = n1 / (n1 + 2 * n2)
    d = modified_kn_discounts(counts)
    assert d[1] == pytest.approx(1 - 2 * y * n2 / n1)
    assert d[2] == pytest.approx(2 - 3 * y * n3 / n2)
    assert d[3] == pytest.approx(3 - 4 * y * n4 / n3)


def test_pad_sentences():
    ids = np.array([5, 6, 7, 8, 9])
    padded, tgt = pad_sentences(ids, np.array([0, 3, 3, 5]), bos=0, eos=1, n_bos=2)
    assert padded.tolist() == [0, 0, 5, 6, 7, 1, 0, 0, 1, 0, 0, 8, 9, 1]
    assert padded[tgt].tolist() == [5, 6, 7, 1, 1, 8, 9, 1]


def reference_model(sentences, V, eos, bos):
    """Straightforward dictionary implementation of the formulas of the module docstring."""
    tri = Counter()
    for s in sentences:
        seq = [bos, bos] + s + [eos]
        for k in range(2, len(seq)):
            tri[tuple(seq[k - 2:k + 1])] += 1
    cont2 = Counter((v, w) for (u, v, w) in tri)  # N1+(. v w)
    cont1 = Counter(w for (v, w) in cont2)  # N1+(. w)
    D3 = modified_kn_discounts(np.array(list(tri.values())))
    D2 = modified_kn_discounts(np.array(list(cont2.values())))
    D1 = modified_kn_discounts(np.array(list(cont1.values())))

    def disc(D, c):
        return D[min(c, 3)] if c > 0 else 0.0

    ctx3 = defaultdict(list)
    for (u, v, _w), c in tri.items():
        ctx3[(u, v)].append(c)
    ctx2 = defaultdict(list)
    for (v, _w), c in cont2.items():
        ctx2[v].append(c)
    T1 = sum(cont1.values())
    g1 = sum(disc(D1, c) for c in cont1.values()) / T1

    def p1(w):
        c = cont1.get(w, 0)
        return max(c - disc(D1, c), 0) / T1 + g1 / V

    def p2(w, v):
        if v not in ctx2:
            return p1(w)
        tot = sum(ctx2[v])
        c = cont2.get((v, w), 0)
        return max(c - disc(D2, c), 0) / tot + sum(disc(D2, x) for x in ctx2[v]) / tot * p1(w)

    def p3(w, u, v):
        if (u, v) not in ctx3:
            return p2(w, v)
        tot = sum(ctx3[(u, v)])
        c = tri.get((u, v, w), 0)
        return max(c - disc(D3, c), 0) / tot + sum(disc(D3, x) for x in ctx3[(u, v)]) / tot * p2(w, v)

    return p3


def corpus(seed=0):
    rng = np.random.default_rng(seed)
    V, eos = 8, 7  # ids 0..6 words (6 = <unk>), 7 = </s>
    sentences = [list(rng.choice(7, size=rng.integers(1, 9), p=[.3, .2, .15, .1, .1, .1, .05])) for _ in range(60)]
    lens = [len(s) for s in sentences]
    ids = np.array([w for s in sentences for w in s])
    return sentences, ids, np.concatenate([[0], np.cumsum(lens)]), V, eos


def test_probabilities_match_hand_computation():
    sentences, ids, offsets, V, eos = corpus()
    kn = KneserNeyTrigram(V, eos).fit(ids, offsets)
    ref = reference_model([list(map(int, s)) for s in sentences], V, eos, V)
    rng = np.random.default_rng(1)
    u = np.concatenate([rng.integers(0, V + 1, 40), [V, V, 3]])  # includes <s> contexts and unseen ones
    v = np.concatenate([rng.integers(0, V + 1, 40), [V, 0, 6]])
    w = np.concatenate([rng.integers(0, V, 40), [0, 7, 2]])
    got = kn.prob(u, v, w)
    want = [ref(int(c), int(a), int(b)) for a, b, c in zip(u, v, w)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_distribution_sums_to_one():
    sentences, ids, offsets, V, eos = corpus(2)
    kn = KneserNeyTrigram(V, eos).fit(ids, offsets)
    w = np.arange(V)
    for u, v in [(V, V), (V, 0), (0, 1), (3, 3), (5, 6), (6, 6)]:
        p = kn.prob(np.full(V, u), np.full(V, v), w)
        assert p.min() > 0
        assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_perplexity_is_exp_mean_nll():
    sentences, ids, offsets, V, eos = corpus(3)
    kn = KneserNeyTrigram(V, eos).fit(ids, offsets)
    lp = kn.sentence_log_probs(ids[:10], np.array([0, 4, 10]))
    assert lp.shape == (12,)  # 10 words + 2 </s>
    assert kn.perplexity(ids[:10], np.array([0, 4, 10])) == pytest.approx(math.exp(-lp.mean()))
    # the training text is more probable than shuffled text
    perm = np.random.default_rng(0).permutation(ids)
    assert kn.perplexity(ids, offsets) < kn.perplexity(perm, offsets)


def test_errors():
    with pytest.raises(PtmError):
        KneserNeyTrigram(5, eos=5)
    with pytest.raises(PtmError, match="ids"):
        KneserNeyTrigram(5, eos=4).fit(np.array([0, 9]), np.array([0, 2]))
    with pytest.raises(PtmError, match="not fitted"):
        KneserNeyTrigram(5, eos=4).prob([0], [0], [0])
