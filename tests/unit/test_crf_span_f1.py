"""The CRF layer against brute-force enumeration, and chunk F1 against seqeval."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.tasks.crf import CRF
from ptmkit.tasks.span_f1 import chunks, span_scores


def _brute(crf: CRF, x: torch.Tensor, n: int):
    """log Z, every path's score and the best path of one sequence ``x [T, K]`` cut to ``n`` tokens,
    by enumerating all K^n tag sequences in float64."""
    K = crf.num_tags
    A, s, e = (p.detach().double() for p in (crf.transitions, crf.start, crf.end))
    x = x[:n].detach().double()
    scores = {}
    for path in itertools.product(range(K), repeat=n):
        v = s[path[0]] + e[path[-1]] + sum(x[t, path[t]] for t in range(n))
        v = v + sum(A[path[t - 1], path[t]] for t in range(1, n))
        scores[path] = float(v)
    vals = torch.tensor(list(scores.values()), dtype=torch.float64)
    return float(torch.logsumexp(vals, 0)), scores, max(scores, key=scores.get)


@pytest.mark.parametrize("K,T", [(1, 3), (3, 1), (3, 4), (4, 5)])
def test_crf_matches_enumeration(K, T):
    torch.manual_seed(K * 10 + T)
    crf = CRF(K)
    with torch.no_grad():  # larger than the init so that the paths differ clearly
        crf.transitions.normal_(0, 1.5)
        crf.start.normal_(0, 1.0)
        crf.end.normal_(0, 1.0)
    lengths = torch.tensor([T, max(1, T - 1), max(1, T - 2)])
    B = len(lengths)
    x = torch.randn(B, T, K) * 2
    mask = torch.arange(T)[None, :] < lengths[:, None]
    tags = torch.randint(0, K, (B, T))
    logz = crf.log_partition(x, mask)
    score = crf.score(x, tags, mask)
    best = crf.decode(x, mask)
    for b in range(B):
        n = int(lengths[b])
        ref_logz, ref_scores, ref_best = _brute(crf, x[b], n)
        assert logz[b].item() == pytest.approx(ref_logz, abs=1e-4)
        assert score[b].item() == pytest.approx(ref_scores[tuple(tags[b, :n].tolist())], abs=1e-4)
        assert tuple(best[b, :n].tolist()) == ref_best
        assert (best[b, n:] == -1).all()
    # log-likelihoods are log-probabilities: they sum to 1 over every path of a sequence
    n = int(lengths[0])
    paths = torch.tensor(list(itertools.product(range(K), repeat=n)))
    ll = crf.log_likelihood(x[:1, :n].expand(len(paths), n, K), paths, torch.ones(len(paths), n, dtype=torch.bool))
    assert torch.logsumexp(ll.double(), 0).item() == pytest.approx(0.0, abs=1e-4)


def test_crf_long_sequences_match_the_sequential_forward_algorithm():
    """The tree reduction agrees with the textbook recursion on long, sharply peaked sequences
    (where a naive exp() would overflow), and its gradients are finite."""
    torch.manual_seed(0)
    K, T = 7, 203
    crf = CRF(K)
    x = (torch.randn(2, T, K) * 30).requires_grad_()
    mask = torch.ones(2, T, dtype=torch.bool)
    mask[1, 150:] = False
    logz = crf.log_partition(x, mask)
    A, s, e, xd = crf.transitions.double(), crf.start.double(), crf.end.double(), x.double()
    for b, n in enumerate((T, 150)):
        alpha = s + xd[b, 0]
        for t in range(1, n):
            alpha = torch.logsumexp(alpha[:, None] + A, 0) + xd[b, t]
        assert logz[b].item() == pytest.approx(torch.logsumexp(alpha + e, 0).item(), rel=1e-5)
    logz.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(crf.transitions.grad).all()
    # d log Z / d x[t, k] is the marginal p(y_t = k): a distribution at real tokens, zero at padding
    # (checked in float64: in float32 a log Z of ~5,000 carries an absolute error of ~1e-4 itself)
    x64 = x.detach().double().requires_grad_()
    crf.double().log_partition(x64, mask).sum().backward()
    assert torch.allclose(x64.grad[0].sum(-1), torch.ones(T, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(x64.grad[1, :150].sum(-1), torch.ones(150, dtype=torch.float64), atol=1e-9)
    assert x64.grad[1, 150:].abs().max() == 0


def test_crf_learns_a_transition_rule():
    """Tags follow 'tag t+1 = tag t + 1 mod K' while emissions are uninformative: only the
    transition matrix can learn it, and Viterbi must then reproduce the chain."""
    torch.manual_seed(0)
    K, T = 4, 6
    crf = CRF(K)
    opt = torch.optim.Adam(crf.parameters(), lr=0.1)
    first = torch.randint(0, K, (64,))
    tags = (first[:, None] + torch.arange(T)) % K
    emissions = torch.zeros(64, T, K)
    emissions[:, 0] = torch.nn.functional.one_hot(first, K).float() * 3  # the first tag is visible
    mask = torch.ones(64, T, dtype=torch.bool)
    for _ in range(100):
        opt.zero_grad()
        loss = -crf.log_likelihood(emissions, tags, mask).mean()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05 * T * np.log(K)  # from T log K = 8.3 nats at the start
    assert torch.equal(crf.decode(emissions, mask), tags)


def test_crf_rejects_bad_masks():
    crf = CRF(3)
    x = torch.zeros(2, 4, 3)
    with pytest.raises(PtmError, match="left-aligned"):
        crf.log_partition(x, torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))
    with pytest.raises(PtmError, match="at least one token"):
        crf.decode(x, torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool))
    with pytest.raises(PtmError, match=r"\[B, T, 3\]"):
        crf.log_partition(torch.zeros(2, 4, 5), torch.ones(2, 4, dtype=torch.bool))


# -- chunk F1 ---------------------------------------------------------------------------------
def test_chunks_follow_the_conlleval_rules():
    sent = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "E-ORG", "S-PER", "I-PER"]
    got = sorted((c[2], c[3]) for c in chunks([sent]))
    # B-PER I-PER | I-LOC opens after O | B-LOC | type change opens I-ORG..E-ORG | S-PER | I-PER after S
    assert got == [(0, 1), (3, 4), (5, 5), (6, 7), (8, 8), (9, 9)]


def _random_tags(rng, n, scheme):
    prefixes = {"iob2": "BIO", "iobes": "BIESO", "messy": "BIESO."}[scheme]
    types = ["PER", "LOC", "ORG"]
    out = []
    for _ in range(n):
        p = prefixes[rng.integers(len(prefixes))]
        out.append("O" if p == "O" else f"{p}-{types[rng.integers(3)]}")
    return out


@pytest.mark.parametrize("scheme", ["iob2", "iobes", "messy"])
def test_span_scores_equal_seqeval(scheme):
    import seqeval.metrics as seqeval  # a test dependency (pyproject: [test])

    rng = np.random.default_rng(len(scheme))
    for _trial in range(30):
        lengths = rng.integers(1, 12, size=rng.integers(1, 6))
        gold = [_random_tags(rng, int(n), scheme) for n in lengths]
        pred = [[g if rng.random() < 0.6 else t for g, t in zip(sent, _random_tags(rng, len(sent), scheme))] for sent in gold]
        ours = span_scores(gold, pred)
        assert ours.precision == pytest.approx(seqeval.precision_score(gold, pred, zero_division=0), abs=1e-12)
        assert ours.recall == pytest.approx(seqeval.recall_score(gold, pred, zero_division=0), abs=1e-12)
        assert ours.f1 == pytest.approx(seqeval.f1_score(gold, pred, zero_division=0), abs=1e-12)
        report = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)
        for name, row in ours.per_type.items():
            assert row["f1"] == pytest.approx(report[name]["f1-score"], abs=1e-12)
            assert row["support"] == report[name]["support"]


def test_span_scores_reject_mismatched_lengths():
    with pytest.raises(PtmError, match="sentence 1 has 2 gold tags but 1 predicted"):
        span_scores([["O"], ["B-PER", "O"]], [["O"], ["O"]])
