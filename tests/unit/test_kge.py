"""Knowledge-graph embeddings: TransE's and DistMult's scores and losses against float64 hand
computations, filtered ranking on a five-entity graph worked by hand, the WN18RR-style split's
leak-freedom, TransE learning a small graph, and `ptm pretrain transe` end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ptmkit import registry
from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.kge import DistMult, TransE, corrupt, train_kge
from ptmkit.knowledge.ranking import evaluate
from ptmkit.knowledge.splits import INVERSES, WN18RR_RELATIONS, split_by_pair, wn18rr_split
from ptmkit.knowledge.triples import KGSplit
from ptmkit.knowledge.wordnet import POINTERS
from ptmkit.static.vectors import WordVectors

H = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.5]])
R = np.array([[1.0, 0.5, -1.5]])
T = np.array([[1.5, -0.5, 0.0], [-1.0, 1.0, 1.0]])


def _model(cls, **kw):
    m = cls(3, 1, 3, **kw)
    with torch.no_grad():
        m.entity.copy_(torch.tensor(np.vstack([H[:1], T[:1], H[1:2]]), dtype=torch.float32))
        m.relation.copy_(torch.tensor(R, dtype=torch.float32))
    return m


def test_transe_score_and_margin_loss_match_float64():
    ids = torch.tensor([0]), torch.tensor([0]), torch.tensor([1])  # (e0, r0, e1)
    for norm in (1, 2):
        m = _model(TransE, norm=norm)
        d = np.linalg.norm(H[0] + R[0] - T[0], ord=norm)  # h + r - t = (0, 0, 0.5): 0.5 in L1 and L2
        assert m.score(*ids).item() == pytest.approx(-d, abs=1e-6)
        pos, neg = torch.tensor([[0, 0, 1]]), torch.tensor([[0, 0, 2]])  # tail corrupted to e2
        d_neg = np.linalg.norm(H[0] + R[0] - H[1], ord=norm)
        assert m.loss(pos, neg, margin=2.0).item() == pytest.approx(max(0.0, 2.0 + d - d_neg), abs=1e-5)
        all_tails = m.score_tails(torch.tensor([0]), torch.tensor([0]))[0].detach().numpy()
        expect = [-np.linalg.norm(H[0] + R[0] - e, ord=norm) for e in (H[0], T[0], H[1])]
        np.testing.assert_allclose(all_tails, expect, atol=1e-5)
        all_heads = m.score_heads(torch.tensor([0]), torch.tensor([1]))[0].detach().numpy()
        np.testing.assert_allclose(all_heads, [-np.linalg.norm(e + R[0] - T[0], ord=norm) for e in (H[0], T[0], H[1])], atol=1e-5)


def test_distmult_score_and_logistic_loss_match_float64():
    m = _model(DistMult)
    s = float(np.sum(H[0] * R[0] * T[0]))  # 0.5*1*1.5 + (-1)(0.5)(-0.5) + 2(-1.5)(0) = 1.0
    assert s == pytest.approx(1.0)
    assert m.score(torch.tensor([0]), torch.tensor([0]), torch.tensor([1])).item() == pytest.approx(s)
    pos = torch.tensor([[0, 0, 1]])
    neg = torch.tensor([[[0, 0, 2], [2, 0, 1]]])
    s_neg = [float(np.sum(H[0] * R[0] * H[1])), float(np.sum(H[1] * R[0] * T[0]))]
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731
    l2 = 0.1
    reg = sum(float(np.sum(v**2)) for v in (H[0], R[0], T[0]))
    expect = softplus(-s) + np.mean([softplus(x) for x in s_neg]) + l2 * reg
    assert m.loss(pos, neg, l2).item() == pytest.approx(expect, rel=1e-5)
    np.testing.assert_allclose(m.score_heads(torch.tensor([0]), torch.tensor([1]))[0].detach().numpy(),
                               [np.sum(e * R[0] * T[0]) for e in (H[0], T[0], H[1])], atol=1e-6)


def test_corruption_replaces_one_side_uniformly():
    pos = torch.tensor([[1, 0, 2]]).repeat(2000, 1)
    neg = corrupt(pos, 7, 3, torch.Generator().manual_seed(0))
    assert neg.shape == (2000, 3, 3) and (neg[..., 1] == 0).all()
    head_kept, tail_kept = neg[..., 0] == 1, neg[..., 2] == 2
    assert (head_kept | tail_kept).all()
    assert abs(float((~tail_kept).float().mean()) - 0.5 * 6 / 7) < 0.03  # half the tails, 6 of 7 draws differ


def test_filtered_ranking_by_hand():
    """Five entities, one relation.  Known: (0,0,1), (0,0,2) train; (2,0,3) valid; test (0,0,3).

    Tail query (0, 0, ?): scores [.1, .9, .8, .5, .7]; raw rank of 3 is 4 (1, 2 and 4 score
    higher); filtered, the true tails 1 and 2 go: rank 2.  Head query (?, 0, 3): scores
    [.6, .2, .9, .3, .1]; entity 2 scores higher but (2,0,3) is true: filtered rank 1.
    MRR = (1/2 + 1) / 2 = 0.75, Hits@1 = 0.5, Hits@3 = 1."""
    tails = torch.tensor([[0.1, 0.9, 0.8, 0.5, 0.7]])
    heads = torch.tensor([[0.6, 0.2, 0.9, 0.3, 0.1]])
    known = np.array([[0, 0, 1], [0, 0, 2], [2, 0, 3], [0, 0, 3]])
    got = evaluate(lambda h, r: tails, lambda r, t: heads, np.array([[0, 0, 3]]), known, 1)
    assert got["tail/mean_rank"] == 2 and got["head/mean_rank"] == 1
    assert (got["mrr"], got["hits@1"], got["hits@3"], got["hits@10"]) == (0.75, 0.5, 1.0, 1.0)
    assert got["per_relation"] == {0: {"mrr": 0.75, "hits@10": 1.0, "queries": 2}}
    # a tie with an unfiltered entity counts half: entity 4 scores like the target
    tied = torch.tensor([[0.1, 0.9, 0.8, 0.5, 0.5]])
    assert evaluate(lambda h, r: tied, lambda r, t: heads, np.array([[0, 0, 3]]), known, 1)["tail/mean_rank"] == 1.5


def _wordnet_like_graph(n=400, seed=0):
    """Random triples of every WordNet relation, with each kept relation's inverse added and the
    symmetric relations in both directions, as WordNet has them."""
    rng = np.random.default_rng(seed)
    relations = sorted(set(POINTERS.values()))
    rid = {r: i for i, r in enumerate(relations)}
    rows = []
    for r in relations:
        h, t = rng.integers(0, n, 150), rng.integers(0, n, 150)
        rows += [(a, rid[r], b) for a, b in zip(h, t) if a != b]
    inverse = {**INVERSES, **{v: k for k, v in INVERSES.items()}}
    symmetric = ("_derivationally_related_form", "_similar_to", "_verb_group", "_also_see", "_antonym")
    rows += [(b, rid[inverse[relations[r]]], a) for a, r, b in rows if relations[r] in inverse]
    rows += [(b, r, a) for a, r, b in rows if relations[r] in symmetric]
    triples = np.unique(np.array(rows, dtype=np.int64), axis=0)
    return KnowledgeGraph([f"e{i}" for i in range(n)], relations, triples)


def test_wn18rr_split_has_no_inverse_leak_and_no_unseen_test_entity():
    graph = _wordnet_like_graph()
    split = wn18rr_split(graph, min_triples=3, seed=1)
    assert split.relations == list(WN18RR_RELATIONS) and not set(INVERSES.values()) & set(split.relations)
    train_pairs = {(h, t) for h, _, t in split.train.tolist()}
    for part in (split.valid, split.test):
        assert len(part) > 0
        for h, _, t in part.tolist():
            assert (t, h) not in train_pairs and (h, t) not in train_pairs  # nor any relation between them
        assert len(np.setdiff1d(np.unique(part[:, [0, 2]]), np.unique(split.train[:, [0, 2]]))) == 0
    again = wn18rr_split(graph, min_triples=3, seed=1)
    np.testing.assert_array_equal(again.test, split.test)  # deterministic for a seed
    assert len(split.train) + len(split.valid) + len(split.test) == len(np.unique(split.all_triples, axis=0))
    # WN18RR's own protocol (triple by triple) does leak symmetric reverses: the reason for "pair"
    loose = wn18rr_split(graph, min_triples=3, seed=1, by="triple")
    train_pairs = {(h, r, t) for h, r, t in loose.train.tolist()}
    assert any((t, r, h) in train_pairs for h, r, t in loose.test.tolist())
    with pytest.raises(PtmError, match="split by 'pair'"):
        split_by_pair(split.train, len(split.entities), by="entity")


def test_transe_learns_a_small_graph():
    """A 40-entity chain: filtered Hits@10 of its own triples near 1 (the model fits the graph)."""
    n = 40
    chain = np.array([(i, 0, i + 1) for i in range(n - 1)])
    split = KGSplit([str(i) for i in range(n)], ["next"], chain, chain[:0], chain)
    _, res = train_kge(split, model="transe", dim=16, epochs=150, lr=0.05, margin=1.0, batch_size=8, progress=False,
                       eval_every=0)
    assert res["test"]["hits@10"] >= 0.95 and res["history"][-1]["loss"] < res["history"][0]["loss"] / 5
    untrained = train_kge(split, model="transe", dim=16, epochs=1, lr=1e-9, batch_size=8, progress=False, eval_every=0)[1]
    assert untrained["test"]["mrr"] < res["test"]["mrr"] / 2


def test_pretrain_transe_end_to_end(tmp_path):
    n = 12
    lines = "".join(f"e{i}\tnext\te{i + 1}\n" for i in range(n - 1))
    (tmp_path / "train.tsv").write_text(lines)
    (tmp_path / "test.tsv").write_text("e0\tnext\te1\n")
    out = tmp_path / "run"
    assert main(["pretrain", "transe", "--data", str(tmp_path / "train.tsv"), str(tmp_path / "test.tsv"), "-o", str(out),
                 "dim=8", "epochs=5", "batch_size=4"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["test"]) >= {"mrr", "hits@1", "hits@3", "hits@10"} and "valid" not in results
    wv = WordVectors.load(out / "vectors.bin")
    assert len(wv) == n and wv.vectors.shape == (n, 8)
    assert WordVectors.load(out / "relations.bin").words == ["next"]
    assert json.loads((out / "config.json").read_text())["static"] == "transe"
    assert (out / "README.md").is_file()
    (tmp_path / "unseen.tsv").write_text("e0\tnext\tz9\n")
    assert main(["pretrain", "distmult", "--data", str(tmp_path / "train.tsv"), str(tmp_path / "unseen.tsv"), "-o",
                 str(tmp_path / "bad"), "epochs=1"]) == 2
    assert not (tmp_path / "bad").exists()
    (tmp_path / "spaced.tsv").write_text("New York\tin\tUSA\n")
    with pytest.raises(PtmError, match="'New York' holds whitespace.*'New_York'"):
        registry.get("static", "transe").train([str(tmp_path / "spaced.tsv")], {"epochs": 1})
