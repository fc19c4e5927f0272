"""Filtered link-prediction ranking (Bordes et al. 2013): MRR and Hits@k over all entities.

For a test triple ``(h, r, t)``, tail prediction scores ``(h, r, e)`` for every entity ``e``;
the *filtered* setting removes every other ``e`` for which ``(h, r, e)`` is a known triple (in
train, valid or test) before ranking ``t``; head prediction does the same for ``(e, r, t)``.  A
rank is ``1 + #{e: s(e) > s(t)} + #{e != t: s(e) = s(t)} / 2`` (ties count half, so a model
scoring everything alike ranks a triple in the middle, not first).  Metrics average over head and
tail predictions of every test triple: ``mrr`` (mean reciprocal rank), ``hits@1/3/10``,
``mean_rank``, and the same per side (``tail/...``, ``head/...``); ``per_relation`` gives each
relation's MRR and Hits@10.

Vectorised: a batch of test triples scores all entities at once (``[B, E]``), and the known true
answers of the batch are found in sorted keys of the known triples (``np.searchsorted`` ranges,
gathered with ``np.repeat``), a sparse mask applied with one indexed assignment.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

HITS = (1, 3, 10)


class KnownAnswers:
    """The known triples indexed for filtering: for queries ``(a, r)`` the answers ``b`` with
    ``(a, r, b)`` known, by the sorted key ``a * R + r``."""

    def __init__(self, known: np.ndarray, n_relations: int, side: str) -> None:
        a, b = (known[:, 0], known[:, 2]) if side == "tail" else (known[:, 2], known[:, 0])
        keys = a * n_relations + known[:, 1]
        order = np.argsort(keys, kind="stable")
        self.keys, self.answers, self.n_relations = keys[order], b[order], n_relations

    def mask(self, a: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Queries ``a``, ``r`` int64 ``[B]`` -> ``(rows, entities)`` of every known answer."""
        q = a * self.n_relations + r
        lo, hi = np.searchsorted(self.keys, q, side="left"), np.searchsorted(self.keys, q, side="right")
        counts = hi - lo
        rows = np.repeat(np.arange(len(q)), counts)
        # positions lo[i] .. hi[i]-1 of every query, laid end to end
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return rows, self.answers[np.repeat(lo, counts) + within]


def filtered_ranks(scores: torch.Tensor, targets: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``scores`` float ``[B, E]`` (higher = more plausible), ``targets`` int64 ``[B]``, the known
    answers ``(rows, cols)`` to filter -> float64 ranks ``[B]`` (ties count half)."""
    scores = scores.detach().to(torch.float64).clone()
    b = torch.arange(len(targets))
    target_scores = scores[b, torch.as_tensor(targets)].clone()
    if len(rows):
        scores[torch.as_tensor(rows), torch.as_tensor(cols)] = -torch.inf
    scores[b, torch.as_tensor(targets)] = target_scores  # the target itself is never filtered
    greater = (scores > target_scores[:, None]).sum(1)
    equal = (scores == target_scores[:, None]).sum(1) - 1
    return (1 + greater + equal / 2).numpy().astype(np.float64)


def summarise(ranks: np.ndarray, prefix: str = "") -> dict[str, float]:
    """MRR, Hits@k and mean rank of float ranks ``[N]``."""
    if not len(ranks):
        return {}
    out = {f"{prefix}mrr": float(np.mean(1.0 / ranks)), f"{prefix}mean_rank": float(np.mean(ranks))}
    out.update({f"{prefix}hits@{k}": float(np.mean(ranks <= k)) for k in HITS})
    return out


def evaluate(score_tails: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             score_heads: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             test: np.ndarray, known: np.ndarray, n_relations: int, batch_size: int = 256) -> dict[str, float]:
    """Filtered head and tail ranking of ``test`` int64 ``[N, 3]``; ``score_tails(h, r) -> [B, E]``,
    ``score_heads(r, t) -> [B, E]``; ``known``: every true triple (train, valid and test)."""
    tails, heads = KnownAnswers(known, n_relations, "tail"), KnownAnswers(known, n_relations, "head")
    tail_ranks, head_ranks = [], []
    with torch.no_grad():
        for s in range(0, len(test), batch_size):
            h, r, t = (test[s : s + batch_size, k] for k in range(3))
            th, tr, tt = (torch.as_tensor(x) for x in (h, r, t))
            tail_ranks.append(filtered_ranks(score_tails(th, tr), t, *tails.mask(h, r)))
            head_ranks.append(filtered_ranks(score_heads(tr, tt), h, *heads.mask(t, r)))
    tail_r = np.concatenate(tail_ranks) if tail_ranks else np.zeros(0)
    head_r = np.concatenate(head_ranks) if head_ranks else np.zeros(0)
    return {**summarise(np.concatenate([tail_r, head_r])), **summarise(tail_r, "tail/"), **summarise(head_r, "head/"),
            "triples": int(len(test)), "per_relation": per_relation(np.concatenate([tail_r, head_r]),
                                                                    np.concatenate([test[:, 1], test[:, 1]]), n_relations)}


def per_relation(ranks: np.ndarray, relations: np.ndarray, n_relations: int) -> dict[int, dict[str, float]]:
    """``{relation id: {"mrr", "hits@10", "queries"}}`` over the head and tail queries of each
    relation present (ranks float ``[Q]``, relations int64 ``[Q]``)."""
    n = np.bincount(relations, minlength=n_relations)
    rr = np.bincount(relations, weights=1.0 / ranks, minlength=n_relations)
    hits = np.bincount(relations, weights=(ranks <= 10).astype(np.float64), minlength=n_relations)
    return {int(r): {"mrr": float(rr[r] / n[r]), "hits@10": float(hits[r] / n[r]), "queries": int(n[r])}
            for r in np.nonzero(n)[0]}
