"""Hewitt & Manning (2019), "A Structural Probe for Finding Syntax in Word Representations".

The distance probe learns ``B [k, d]`` so that the squared distance ``||B (h_i - h_j)||²`` between
two words' vectors approximates their path length in the dependency tree; the depth probe so that
``||B h_i||²`` approximates the word's depth.  Loss (H&M eq. 2 / 4): per sentence of ``s`` words the
L1 difference summed over pairs (words) divided by ``s²`` (``s``), averaged over sentences.
Scored by :mod:`ptmkit.analysis.trees` (UUAS, DSpr., root accuracy, NSpr.).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from ptmkit.analysis import trees as T
from ptmkit.analysis.probes import ProbeConfig, fit


class StructuralProbe(nn.Module):
    """``B [rank, dim]``; :meth:`distances` ``[S, W, d] -> [S, W, W]``, :meth:`depths` ``-> [S, W]``."""

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.proj = nn.Parameter(torch.empty(rank, dim))
        nn.init.uniform_(self.proj, -0.05, 0.05)

    def distances(self, h: torch.Tensor) -> torch.Tensor:
        z = h @ self.proj.T
        diff = z[:, :, None, :] - z[:, None, :, :]
        return (diff ** 2).sum(-1)

    def depths(self, h: torch.Tensor) -> torch.Tensor:
        return ((h @ self.proj.T) ** 2).sum(-1)


def _padded(vectors: Sequence[np.ndarray], mean: np.ndarray, sd: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    W = max(len(v) for v in vectors)
    x = np.zeros((len(vectors), W, vectors[0].shape[1]), dtype=np.float32)
    m = np.zeros((len(vectors), W), dtype=bool)
    for k, v in enumerate(vectors):
        x[k, :len(v)] = (v - mean) / sd
        m[k, :len(v)] = True
    return torch.from_numpy(x), torch.from_numpy(m)


def train_structural(kind: str, train_vecs: Sequence[np.ndarray], train_trees: Sequence[Sequence[int]],
                     test_vecs: Sequence[np.ndarray], test_trees: Sequence[Sequence[int]],
                     test_punct: Sequence[np.ndarray] | None = None, rank: int = 32,
                     cfg: ProbeConfig = ProbeConfig(epochs=30, lr=1e-3, batch_size=20)) -> dict[str, float]:
    """Train the ``distance`` or ``depth`` probe on sentences (``vecs[k] [W, d]``, ``trees[k]`` heads)
    and score it on the test sentences: ``uuas`` and ``dspr``, or ``root_accuracy`` and ``nspr``."""
    torch.manual_seed(cfg.seed)
    flat = np.concatenate(train_vecs).astype(np.float64)
    mean, sd = flat.mean(0), flat.std(0)
    sd[sd == 0] = 1.0
    x, mask = _padded(train_vecs, mean, sd)
    if kind == "distance":
        gold = np.zeros(mask.shape + (mask.shape[1],), dtype=np.float32)
        for k, t in enumerate(train_trees):
            gold[k, :len(t), :len(t)] = T.distances(t)
    else:
        gold = np.zeros(mask.shape, dtype=np.float32)
        for k, t in enumerate(train_trees):
            gold[k, :len(t)] = T.depths(t)
    gold_t = torch.from_numpy(gold)
    lengths = mask.sum(1).float()
    probe = StructuralProbe(x.shape[-1], rank)

    def loss(m: StructuralProbe, idx: torch.Tensor) -> torch.Tensor:
        w = mask[idx]
        s = lengths[idx]
        if kind == "distance":
            pair = w[:, :, None] & w[:, None, :]
            err = ((m.distances(x[idx]) - gold_t[idx]).abs() * pair).sum((1, 2)) / s ** 2
        else:
            err = ((m.depths(x[idx]) - gold_t[idx]).abs() * w).sum(1) / s
        return err.mean()

    fit(probe, torch.arange(len(x)), loss, cfg)
    tx, tmask = _padded(test_vecs, mean, sd)
    with torch.no_grad():
        out = probe.distances(tx) if kind == "distance" else probe.depths(tx)
    n = tmask.sum(1).tolist()
    if kind == "distance":
        return T.distance_scores([out[k, :w, :w].numpy() for k, w in enumerate(n)], test_trees, test_punct)
    return T.depth_scores([out[k, :w].numpy() for k, w in enumerate(n)], test_trees, test_punct)


__all__ = ["StructuralProbe", "train_structural"]
