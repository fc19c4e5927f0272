"""Dependency trees as the structural probe sees them (Hewitt & Manning 2019): path distances,
depths, the minimum spanning tree of a predicted distance matrix and the probe's scores.

A tree is ``heads [W]``: each word's head index, -1 for the root.

* UUAS: the share of gold (undirected) edges found in the minimum spanning tree of the predicted
  distances, punctuation excluded from both (H&M).
* DSpr.: per word, the Spearman correlation of its predicted and gold distances to the other
  words; averaged over the words of all sentences of one length, then over the lengths 5 to 50.
* root accuracy: the word of least predicted depth is the gold root (punctuation excluded).
* NSpr.: per sentence, the Spearman correlation of predicted and gold depths, averaged per length
  and then over the lengths 5 to 50.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from ptmkit.errors import PtmError

LENGTHS = (5, 50)  # H&M average their Spearman correlations over sentence lengths 5..50


def check_tree(heads: Sequence[int]) -> np.ndarray:
    """``heads`` as an int array after checking it is one tree (one root, no cycle)."""
    h = np.asarray(heads, dtype=np.int64)
    W = len(h)
    if (h == -1).sum() != 1 or ((h < -1) | (h >= W)).any():
        raise PtmError(f"a dependency tree needs exactly one root (-1) and heads within 0..{W - 1}; got {h.tolist()}")
    for i in range(W):
        seen, j = 0, i
        while j != -1:
            j, seen = int(h[j]), seen + 1
            if seen > W:
                raise PtmError(f"the heads {h.tolist()} contain a cycle")
    return h


def depths(heads: Sequence[int]) -> np.ndarray:
    """Each word's number of edges to the root ``[W]``."""
    h = check_tree(heads)
    out = np.zeros(len(h), dtype=np.int64)
    for i in range(len(h)):
        j = i
        while h[j] != -1:
            j = int(h[j])
            out[i] += 1
    return out


def distances(heads: Sequence[int]) -> np.ndarray:
    """Path lengths between all pairs of words ``[W, W]``: ``d(i, j) = depth_i + depth_j - 2 depth_lca``."""
    h = check_tree(heads)
    d = depths(h)
    W = len(h)
    paths = []
    for i in range(W):
        chain, j = [i], i
        while h[j] != -1:
            j = int(h[j])
            chain.append(j)
        paths.append(set(chain))
    out = np.zeros((W, W), dtype=np.int64)
    for i in range(W):
        for j in range(i + 1, W):
            lca_depth = max(d[k] for k in paths[i] & paths[j])
            out[i, j] = out[j, i] = d[i] + d[j] - 2 * lca_depth
    return out


def min_spanning_edges(dist: np.ndarray) -> set[frozenset[int]]:
    """The undirected edges of a minimum spanning tree of ``dist [n, n]`` (Prim's algorithm)."""
    n = len(dist)
    if n < 2:
        return set()
    inside = np.zeros(n, dtype=bool)
    inside[0] = True
    best = dist[0].astype(np.float64).copy()
    parent = np.zeros(n, dtype=np.int64)
    edges = set()
    for _ in range(n - 1):
        cand = np.where(inside, np.inf, best)
        j = int(cand.argmin())
        edges.add(frozenset((int(parent[j]), j)))
        inside[j] = True
        closer = dist[j] < best
        best = np.where(closer, dist[j], best)
        parent = np.where(closer, j, parent)
    return edges


def gold_edges(heads: Sequence[int], keep: np.ndarray) -> set[frozenset[int]]:
    """The tree's undirected edges between kept words (indices into the kept words)."""
    new = np.cumsum(keep) - 1
    return {frozenset((int(new[i]), int(new[h]))) for i, h in enumerate(heads) if h >= 0 and keep[i] and keep[h]}


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (Pearson's r of the tie-averaged ranks, as scipy's ``spearmanr``); 0 where
    either side is constant (a star tree's distances from its centre)."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(x) -> np.ndarray:
    """1-based ranks of ``x``, tied values sharing the mean of their ranks."""
    _, inverse, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2.0)[inverse.ravel()]


def _by_length(values: dict[int, list[float]]) -> float:
    picked = [np.mean(v) for n, v in values.items() if LENGTHS[0] <= n <= LENGTHS[1] and v]
    return float(np.mean(picked)) if picked else float("nan")


def distance_scores(pred: Sequence[np.ndarray], trees: Sequence[Sequence[int]],
                    punct: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """UUAS and DSpr. of predicted distance matrices ``pred[k] [W, W]`` against ``trees``."""
    found = total = 0
    spear: dict[int, list[float]] = defaultdict(list)
    for k, (p, heads) in enumerate(zip(pred, trees)):
        keep = ~np.asarray(punct[k], dtype=bool) if punct is not None else np.ones(len(heads), dtype=bool)
        gold = gold_edges(heads, keep)
        sub = p[np.ix_(keep, keep)]
        found += len(gold & min_spanning_edges(sub))
        total += len(gold)
        g = distances(heads)
        W = len(heads)
        for i in range(W):
            others = np.arange(W) != i
            if W >= 3:
                spear[W].append(_spearman(p[i, others], g[i, others]))
    return {"uuas": found / total if total else float("nan"), "dspr": _by_length(spear)}


def depth_scores(pred: Sequence[np.ndarray], trees: Sequence[Sequence[int]],
                 punct: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """Root accuracy and NSpr. of predicted depths ``pred[k] [W]`` against ``trees``."""
    right = n = 0
    spear: dict[int, list[float]] = defaultdict(list)
    for k, (p, heads) in enumerate(zip(pred, trees)):
        keep = ~np.asarray(punct[k], dtype=bool) if punct is not None else np.ones(len(heads), dtype=bool)
        heads = np.asarray(heads)
        root = int(np.flatnonzero(heads == -1)[0])
        if keep[root]:
            right += int(np.flatnonzero(keep)[np.argmin(p[keep])] == root)
            n += 1
        if len(heads) >= 3:
            spear[len(heads)].append(_spearman(p, depths(heads)))
    return {"root_accuracy": right / n if n else float("nan"), "nspr": _by_length(spear)}


__all__ = ["LENGTHS", "check_tree", "depth_scores", "depths", "distance_scores", "distances", "gold_edges",
           "min_spanning_edges"]
