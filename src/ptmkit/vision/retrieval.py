"""Retrieval and zero-shot classification from a score matrix.

Every vision–language objective scores images against texts (``score [N, M]``, higher = better);
these measures read only that matrix, so a dual encoder's cosine, a cross-encoder's matching logit
and a generative model's log-likelihood are compared on one footing.

Texts may repeat (two concepts with one name), so correctness is by *label*: image ``i`` with label
``image_labels[i]`` is answered correctly at rank k when one of the top-k texts carries that label.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

KS = (1, 5, 10)


def recall_at_k(scores: np.ndarray, query_labels: np.ndarray, item_labels: np.ndarray,
                ks: Sequence[int] = KS) -> dict[str, float]:
    """``scores [Q, I]``: for each query the share whose correct item (same label) is within the top
    ``k`` items, for each ``k``; plus the mean reciprocal rank (``mrr``) of the first correct item.
    Ties are broken against the query (an item scored equal to the correct one ranks before it)."""
    scores = np.asarray(scores, dtype=np.float64)
    correct = query_labels[:, None] == item_labels[None, :]  # [Q, I]
    best_correct = np.where(correct, scores, -np.inf).max(axis=1)  # [Q]
    # rank of the best correct item: items scoring at least as high that are not correct, + 1
    rank = (np.where(~correct, scores, -np.inf) >= best_correct[:, None]).sum(axis=1) + 1
    out = {f"R@{k}": float((rank <= k).mean()) for k in ks}
    out["mrr"] = float((1.0 / rank).mean())
    return out


def chance_recall(query_labels: np.ndarray, item_labels: np.ndarray, ks: Sequence[int] = KS) -> dict[str, float]:
    """Expected recall at ``k`` of a random ranking: per query, 1 - C(I - c, k) / C(I, k) with ``c``
    correct items among ``I``, averaged."""
    n = len(item_labels)
    counts = (query_labels[:, None] == item_labels[None, :]).sum(axis=1)
    out = {}
    for k in ks:
        miss = np.ones(len(counts))
        for j in range(min(k, n)):  # P(no correct item among k draws without replacement)
            miss *= np.clip((n - counts - j) / (n - j), 0.0, 1.0)
        out[f"R@{k}"] = float((1.0 - miss).mean())
    return out


def zero_shot_accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """``scores [N, C]`` of images against one prompt per class; ``labels [N]`` the true class index."""
    return float((np.asarray(scores).argmax(axis=1) == labels).mean())
