"""Classification metrics: accuracy, macro-F1 and binary F1.

All functions take integer class indices (``y_true[N]``, ``y_pred[N]``) and are computed
from one confusion matrix, so they agree with each other by construction.
"""

from __future__ import annotations

import numpy as np

from ptmkit.errors import PtmError


def _as_indices(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=np.int64).reshape(-1)
    p = np.asarray(y_pred, dtype=np.int64).reshape(-1)
    if t.shape != p.shape:
        raise PtmError(f"metrics: {t.size} gold labels but {p.size} predictions")
    if t.size == 0:
        raise PtmError("metrics: no examples to score")
    if (t < 0).any() or (p < 0).any():
        raise PtmError("metrics: label indices must be >= 0")
    return t, p


def confusion_matrix(y_true, y_pred, num_labels: int | None = None) -> np.ndarray:
    """``C[i, j]`` = number of examples of gold class ``i`` predicted as ``j``; shape ``[K, K]``."""
    t, p = _as_indices(y_true, y_pred)
    k = int(num_labels) if num_labels is not None else int(max(t.max(), p.max())) + 1
    if t.max() >= k or p.max() >= k:
        raise PtmError(f"metrics: a label index is >= num_labels={k}")
    return np.bincount(t * k + p, minlength=k * k).reshape(k, k)


def accuracy(y_true, y_pred) -> float:
    """Fraction of examples whose prediction equals the gold label."""
    t, p = _as_indices(y_true, y_pred)
    return float((t == p).mean())


def per_class_f1(y_true, y_pred, num_labels: int | None = None) -> np.ndarray:
    """F1 = 2·TP / (2·TP + FP + FN) per class, shape ``[K]``; a class absent from both gold and
    predictions has 0/0, which is defined as 0 (the scikit-learn convention)."""
    c = confusion_matrix(y_true, y_pred, num_labels).astype(np.float64)
    tp = np.diag(c)
    fp = c.sum(axis=0) - tp
    fn = c.sum(axis=1) - tp
    denom = 2 * tp + fp + fn
    return np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)


def macro_f1(y_true, y_pred, num_labels: int | None = None) -> float:
    """Unweighted mean of the per-class F1 over the ``num_labels`` classes."""
    return float(per_class_f1(y_true, y_pred, num_labels).mean())


def binary_f1(y_true, y_pred, positive: int = 1) -> float:
    """F1 of the class ``positive`` (index 1 by default: the second label of the vocabulary)."""
    t, p = _as_indices(y_true, y_pred)
    k = int(max(t.max(), p.max(), positive)) + 1
    return float(per_class_f1(t, p, k)[positive])


def classification_metrics(y_true, y_pred, num_labels: int) -> dict[str, float]:
    """``accuracy`` and ``macro_f1`` always; ``f1`` (binary F1 of class 1) when there are two labels."""
    out = {"accuracy": accuracy(y_true, y_pred), "macro_f1": macro_f1(y_true, y_pred, num_labels)}
    if num_labels == 2:
        out["f1"] = binary_f1(y_true, y_pred, positive=1)
    return out

def multi_hot(sets: list[list[str]], names: list[str]) -> np.ndarray:
    """``[N, K]`` uint8: row ``i`` has 1 at the index of each label of ``sets[i]`` in ``names``."""
    index = {name: k for k, name in enumerate(names)}
    out = np.zeros((len(sets), len(names)), dtype=np.uint8)
    for i, labels in enumerate(sets):
        out[i, [index[x] for x in labels]] = 1
    return out


def multi_label_scores(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """``micro_f1``, ``macro_f1`` (over the labels the gold or predicted sets hold) and
    ``exact_match`` of ``predicted`` against ``gold`` (both ``[N, K]``, 0/1 or bool)."""
    g, p = np.asarray(gold) > 0, np.asarray(predicted) > 0
    tp, fp, fn = (g & p).sum(axis=0), (~g & p).sum(axis=0), (g & ~p).sum(axis=0)
    denominator = 2 * tp + fp + fn  # [K]
    seen = denominator > 0
    micro = 2 * tp.sum() / denominator.sum() if denominator.sum() else 0.0
    macro = float(np.mean(2 * tp[seen] / denominator[seen])) if seen.any() else 0.0
    return {"micro_f1": float(micro), "macro_f1": macro, "exact_match": float((g == p).all(axis=1).mean())}


def per_label_f1(gold: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Each label's F1 ``[K]`` (0 where it has neither gold nor predicted examples)."""
    g, p = np.asarray(gold) > 0, np.asarray(predicted) > 0
    tp, fp, fn = (g & p).sum(axis=0), (~g & p).sum(axis=0), (g & ~p).sum(axis=0)
    return np.divide(2 * tp, 2 * tp + fp + fn, out=np.zeros(len(tp)), where=(2 * tp + fp + fn) > 0)
