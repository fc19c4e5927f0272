"""Retrieval scores of sentence vectors: each query's gold candidate ranked among all candidates by
cosine similarity; recall@k (the gold candidate among the top ``k``) and the mean reciprocal rank.

A tie counts against the query: the gold candidate's rank is the number of candidates that score
*at least* as high as it does (itself included), so vectors that cannot tell candidates apart (all
equal) rank the gold candidate last, never first.
"""

from __future__ import annotations

import numpy as np

CHUNK = 1024  # queries scored at a time: the similarity block stays [CHUNK, C]


def unit(x: np.ndarray) -> np.ndarray:
    """Rows of ``x [N, D]`` in float64 divided by their L2 norm (a zero row stays zero)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def ranks_of(similarity: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """1-based ranks ``[N]`` of candidate ``gold[i]`` in row ``i`` of ``similarity [N, C]`` (ties count
    against it: see the module docstring)."""
    s = np.asarray(similarity, dtype=np.float64)
    g = s[np.arange(len(s)), np.asarray(gold, dtype=np.int64)]
    return (s >= g[:, None]).sum(axis=1).astype(np.int64)


def cosine_retrieval(queries: np.ndarray, candidates: np.ndarray, gold: np.ndarray,
                     chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank the candidates ``[C, D]`` for each query ``[N, D]`` by cosine similarity; returns the gold
    candidates' ranks ``[N]`` (:func:`ranks_of`), the best candidate of each query ``[N]`` and its cosine ``[N]``."""
    q, c = unit(queries), unit(candidates)
    ranks = np.zeros(len(q), dtype=np.int64)
    best = np.zeros(len(q), dtype=np.int64)
    best_cos = np.zeros(len(q), dtype=np.float64)
    for start in range(0, len(q), chunk):
        rows = slice(start, start + chunk)
        s = q[rows] @ c.T  # [n, C]
        ranks[rows] = ranks_of(s, gold[rows])
        best[rows] = s.argmax(axis=1)
        best_cos[rows] = s.max(axis=1)
    return ranks, best, best_cos


def retrieval_scores(ranks: np.ndarray) -> dict[str, float]:
    """``mrr`` (mean of 1 / rank), ``recall_at_1`` and ``recall_at_10`` of the gold ranks ``[N]``."""
    r = np.asarray(ranks, dtype=np.float64)
    if len(r) == 0:
        return {"mrr": 0.0, "recall_at_1": 0.0, "recall_at_10": 0.0}
    return {"mrr": float(np.mean(1.0 / r)), "recall_at_1": float(np.mean(r <= 1)),
            "recall_at_10": float(np.mean(r <= 10))}


__all__ = ["cosine_retrieval", "ranks_of", "retrieval_scores", "unit"]
