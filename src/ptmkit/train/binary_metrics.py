"""Ranking and thresholded metrics of a binary detector, computed on tensors without Python loops.

``roc_auc`` is the area under the ROC curve as the Mann–Whitney statistic: the probability that
a random positive scores above a random negative, ties counting one half,

    AUC = (Σ_{i positive} rank_i − n_pos (n_pos + 1) / 2) / (n_pos · n_neg),

with ``rank`` the 1-based rank of each score among all of them (tied scores share their mean
rank).  It is threshold-free, so it tells a detector that ranks replaced tokens above originals
from one that only learned the base rate (AUC 0.5 with any constant output), which the accuracy
at 0.5 cannot when the positives are rare.
"""

from __future__ import annotations

import torch


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """ROC AUC of ``scores [N]`` (any monotone score: logits or probabilities) against
    ``labels [N]`` (bool or 0/1).  A float64 scalar; 0.5 when one class is absent (no ranking
    information), so averaging it over batches stays defined."""
    s = scores.detach().reshape(-1).double()
    y = labels.detach().reshape(-1).bool()
    n_pos = int(y.sum())
    n_neg = y.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return torch.tensor(0.5, dtype=torch.float64, device=s.device)
    sorted_s, order = torch.sort(s)
    _, group, counts = torch.unique_consecutive(sorted_s, return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, 0).double()  # 1-based rank of each tie group's last member
    mean_rank = last - (counts.double() - 1.0) / 2.0  # mean rank of the group
    rank_sum = mean_rank[group][y[order]].sum()
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def precision_recall(predicted: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Precision and recall of the positive class for boolean ``predicted [N]`` and ``labels [N]``;
    each is 0 when its denominator is (nothing predicted, nothing to find)."""
    predicted = predicted.reshape(-1).bool()
    labels = labels.reshape(-1).bool()
    hits = (predicted & labels).sum().float()
    return hits / predicted.sum().clamp(min=1), hits / labels.sum().clamp(min=1)
