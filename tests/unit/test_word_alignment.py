"""Word alignment: SimAlign's Argmax and IterMax on hand-made matrices, AER by hand, IBM Model 1's EM
against a brute-force float64 loop, symmetrisation, and the baseline on a synthetic corpus."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from ptmkit.analysis.word_alignment import (
    NULL,
    alignment_scores,
    argmax_align,
    dataset_baseline,
    ibm1_align,
    ibm1_align_all,
    ibm1_baseline,
    ibm_model1,
    itermax_align,
    symmetrize,
)
from ptmkit.errors import PtmError

SIM = np.array([[0.9, 0.1, 0.2],
                [0.8, 0.3, 0.1],
                [0.1, 0.2, 0.7]])


def test_argmax_keeps_the_mutual_best_pairs():
    # row 1's best column is 0, but column 0's best row is 0: no link for row 1
    assert argmax_align(SIM) == {(0, 0), (2, 2)}
    assert argmax_align(SIM.T) == {(0, 0), (2, 2)}
    assert argmax_align(np.zeros((0, 3))) == set()
    with pytest.raises(PtmError, match="source words, target words"):
        argmax_align(np.zeros(3))


def test_itermax_by_hand():
    # round 2 weights (rows 0, 2 and columns 0, 2 aligned): W = [[0, a, 0], [a, 1, a], [0, a, 0]]
    # alpha 0.9: row 1 -> column 0 (0.72 > 0.3), column 0 -> row 1 (0.72): link (1, 0)
    assert itermax_align(SIM, max_iter=2, alpha=0.9) == {(0, 0), (1, 0), (2, 2)}
    # alpha 0.3: 0.24 < 0.3, row 1 -> column 1 and column 1 -> row 1 (0.3 > 0.03, 0.06): link (1, 1)
    assert itermax_align(SIM, max_iter=2, alpha=0.3) == {(0, 0), (1, 1), (2, 2)}
    # round 3 (alpha 0.9): only column 1 is unaligned; its weighted column [0.09, 0.27, 0.18] -> row 1
    assert itermax_align(SIM, max_iter=3, alpha=0.9) == {(0, 0), (1, 0), (1, 1), (2, 2)}
    assert itermax_align(SIM, max_iter=1) == argmax_align(SIM)
    # everything aligned after Argmax: the zero weights add no link (not even a tie at 0)
    assert itermax_align(np.eye(2), max_iter=4) == {(0, 0), (1, 1)}
    with pytest.raises(PtmError, match="alpha"):
        itermax_align(SIM, alpha=1.5)


def test_alignment_scores_by_hand():
    predicted = [{(0, 0), (1, 1), (1, 2)}, {(0, 1), (2, 2)}]
    sure = [{(0, 0), (1, 1)}, {(0, 0), (1, 1)}]
    possible = [{(1, 2)}, {(0, 1)}]
    # |A| = 5, |S| = 4, |A∩S| = 2, |A∩P| = 3 + 1 = 4
    got = alignment_scores(predicted, sure, possible)
    assert got["precision"] == pytest.approx(4 / 5) and got["recall"] == pytest.approx(2 / 4)
    assert got["f1"] == pytest.approx(2 * 0.8 * 0.5 / 1.3) and got["aer"] == pytest.approx(1 - 6 / 9)
    # without possible links P = S: |A∩P| = 2
    plain = alignment_scores(predicted, [list(map(list, s)) for s in sure])
    assert plain["precision"] == pytest.approx(2 / 5) and plain["aer"] == pytest.approx(1 - 4 / 9)
    assert alignment_scores([set()], [set()])["aer"] == 0.0
    with pytest.raises(PtmError, match="one link set per sentence pair"):
        alignment_scores([set()], [])


def brute_ibm1(pairs, iterations):
    """IBM Model 1 EM written out word by word in float64."""
    n_f = len({f for _, tgt in pairs for f in tgt})
    t = {(e, f): 1.0 / n_f for src, tgt in pairs for e in [NULL, *src] for f in tgt}
    for _ in range(iterations):
        count, total = defaultdict(float), defaultdict(float)
        for src, tgt in pairs:
            es = [NULL, *src]
            for f in tgt:
                z = sum(t[(e, f)] for e in es)
                for e in es:
                    count[(e, f)] += t[(e, f)] / z
                    total[e] += t[(e, f)] / z
        t = {(e, f): count[(e, f)] / total[e] for (e, f) in t}
    return t


def _random_corpus(seed, n=30, vocab=7):
    rng = np.random.default_rng(seed)
    words = [f"w{k}" for k in range(vocab)]
    return [([words[i] for i in rng.integers(0, vocab, rng.integers(1, 6))],
             [w.upper() for w in (words[i] for i in rng.integers(0, vocab, rng.integers(1, 7)))]) for _ in range(n)]


@pytest.mark.parametrize("iterations", [0, 1, 5])
def test_em_matches_the_brute_force_loop(iterations):
    pairs = _random_corpus(0) + [(["w1", "w1"], ["W1", "W1", "W2"])]  # repeated words on both sides
    model = ibm_model1(pairs, iterations)
    table, ref = model.table(), brute_ibm1(pairs, iterations)
    assert table.keys() == ref.keys()
    assert max(abs(table[k] - ref[k]) for k in ref) < 1e-9
    assert len(model.log_likelihood) == iterations
    assert all(b >= a - 1e-9 for a, b in zip(model.log_likelihood, model.log_likelihood[1:]))  # EM never loses


def test_the_toy_corpus_learns_its_translations():
    pairs = [("das Haus".split(), "the house".split()), ("das Buch".split(), "the book".split()),
             ("ein Buch".split(), "a book".split())]
    model = ibm_model1(pairs, 20)
    table = model.table()
    for e, f in [("das", "the"), ("Haus", "house"), ("Buch", "book"), ("ein", "a")]:
        assert max((p, ff) for (ee, ff), p in table.items() if ee == e)[1] == f
    assert ibm1_align(model, "das Haus".split(), "the house".split()) == {(0, 0), (1, 1)}
    assert ibm1_align(model, "ein Buch".split(), "a book".split()) == {(0, 0), (1, 1)}
    assert ibm1_align(model, "das neu".split(), "the new".split()) == {(0, 0)}  # an unseen word: no link


def test_batched_alignment_matches_a_per_word_argmax():
    pairs = _random_corpus(1, n=40)
    model = ibm_model1(pairs, 3)
    table = model.table()
    for (src, tgt), links in zip(pairs, ibm1_align_all(model, pairs + [([], ["W1"]), (["w1"], [])])):
        want = set()
        for j, f in enumerate(tgt):
            probs = [table[(e, f)] for e in [NULL, *src]]
            best = int(np.argmax(probs))
            if best > 0:
                want.add((best - 1, j))
        assert links == want
    assert ibm1_align_all(model, [([], ["W1"]), (["w1"], [])]) == [set(), set()]


def test_symmetrize():
    fwd, bwd = {(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (1, 2)}
    assert symmetrize(fwd, bwd) == {(0, 0), (1, 1)}
    assert symmetrize(fwd, bwd, "union") == fwd | bwd
    assert symmetrize(fwd, bwd, "grow-diag") == fwd | bwd  # each added link has one unaligned word
    # (0, 1) neighbours (0, 0), but both its words are aligned already: not added
    assert symmetrize({(0, 0), (1, 1), (0, 1)}, {(0, 0), (1, 1)}, "grow-diag") == {(0, 0), (1, 1)}
    # (2, 2) in the union but next to nothing of the alignment: not added
    assert symmetrize({(0, 0), (2, 2)}, {(0, 0)}, "grow-diag") == {(0, 0)}
    with pytest.raises(PtmError, match="grow-diag"):
        symmetrize(fwd, bwd, "grow")


def _shuffled_corpus(seed, n):
    """Six words, each with one translation; the target side is the source words' translations shuffled."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        src = [f"s{k}" for k in rng.choice(6, size=rng.integers(2, 5), replace=False)]
        order = rng.permutation(len(src))
        rows.append({"grc": src, "en": [src[k].replace("s", "T") for k in order],
                     "links": [[int(k), j] for j, k in enumerate(order)]})
    return rows


def test_baseline_finds_the_links_of_a_clean_corpus(tmp_path):
    train, test = _shuffled_corpus(0, 60), _shuffled_corpus(1, 10)
    scores = ibm1_baseline([(r["grc"], r["en"]) for r in train], test, iterations=10)
    for method in ("forward", "backward", "intersection", "grow-diag"):
        assert scores[method]["aer"] == pytest.approx(0.0), method
    assert scores["sizes"] == {"train_pairs": 60, "test_pairs": 10, "iterations": 10}
    # the same from a data set directory
    (tmp_path / "parallel").mkdir()
    parallel = [{"en": " ".join(r["en"]), "grc": " ".join(r["grc"])} for r in train]
    (tmp_path / "parallel" / "en-grc.train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in parallel))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    assert dataset_baseline(tmp_path, iterations=10)["intersection"] == scores["intersection"]
    with pytest.raises(PtmError, match="ptm data get"):
        dataset_baseline(tmp_path, split="dev")
