"""The labels-only twin of a distilled student, and whether distillation beat it.

A twin is the same student (the same kind, shape, start and seed) trained on the task's gold
examples alone, with the gold-label loss only (``alpha = 1``: what ``ptm distil --alpha 1
--augment off`` trains).  Distillation is worth its teacher only when the distilled students score
above their twins by more than chance: :func:`verdict` compares them seed by seed (the same seed
starts both from the same weights), and calls the gain real only when its mean exceeds both
:data:`TOLERANCE` and the spread of the per-seed gains (their sample standard deviation, with two
seeds or more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ptmkit.compress.distil import DistilSettings

# Half a point of accuracy (or F1): below what one test split of a few hundred to a thousand
# examples can tell apart (1,005 sentences give a binomial standard error of about 1 point at 85 %).
TOLERANCE = 0.005
TWIN_DIR = "labels-only-seed{seed}"


def twin_settings() -> DistilSettings:
    """The twin's loss: the gold labels alone (no soft term, no intermediate losses)."""
    return DistilSettings(alpha=1.0)


def verdict(distilled: Sequence[float], labels_only: Sequence[float], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Compare the distilled students' scores with their twins', pairwise by seed.

    Returns ``gain`` (the mean of distilled - labels-only), ``spread`` (the per-seed gains' sample
    standard deviation; 0 with one seed), ``margin`` (``max(tolerance, spread)``) and ``better``
    (``gain > margin``: distillation beat labels alone)."""
    d, t = np.asarray(distilled, dtype=np.float64), np.asarray(labels_only, dtype=np.float64)
    if d.shape != t.shape or d.size == 0:
        raise ValueError(f"one labels-only score per distilled score is needed, got {d.size} and {t.size}")
    gains = d - t
    gain = float(gains.mean())
    spread = float(gains.std(ddof=1)) if gains.size > 1 else 0.0
    margin = max(float(tolerance), spread)
    return {"gain": gain, "spread": spread, "margin": margin, "better": gain > margin}


def verdict_lines(v: dict[str, Any], metric: str, distilled: float, labels_only: float, split: str = "test") -> list[str]:
    """What the distillation says of ``v`` (:func:`verdict`), in plain words, each line short."""
    scores = (f"{split} {metric} {distilled:.4f} distilled, {labels_only:.4f} on gold labels alone "
              f"(gain {v['gain']:+.4f}, margin {v['margin']:.4f})")
    if v["better"]:
        return [f"distillation beats the labels-only twin: {scores}"]
    return [f"distillation is no better than the labels-only twin: {scores}",
            "the teacher added nothing the labels did not: keep the simpler labels-only student, or give the "
            "student more text (--augment N, --unlabelled FILE)"]


__all__ = ["TOLERANCE", "TWIN_DIR", "twin_settings", "verdict", "verdict_lines"]
