"""Diagnostic classifiers on frozen features: a linear probe and a probe with one hidden layer
(Hewitt & Liang 2019's "linear" and "MLP-1"), trained by Adam on the cross-entropy, then scored
by accuracy on held-out words.

Everything is seeded (the initialisation and the order of the mini-batches come from one
``torch.Generator``), so the same features give the same accuracy.  Features are standardised with
the training set's mean and standard deviation first (the layers of a Transformer differ in scale
by orders of magnitude; a fixed learning rate then suits every layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from ptmkit.errors import PtmError


@dataclass(frozen=True)
class ProbeConfig:
    """hidden: 0 for a linear probe, else the width of the one hidden layer (ReLU); epochs, lr,
    batch_size, weight_decay: Adam's run; seed: initialisation and batch order."""

    hidden: int = 0
    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 256
    weight_decay: float = 0.0
    seed: int = 0


def make_probe(dim: int, num_labels: int, hidden: int) -> nn.Module:
    """``[N, dim] -> [N, num_labels]``: linear (``hidden == 0``) or Linear-ReLU-Linear."""
    if hidden <= 0:
        return nn.Linear(dim, num_labels)
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, num_labels))


def standardiser(x: np.ndarray) -> Callable[[np.ndarray], torch.Tensor]:
    """``f(z) = (z - mean) / sd`` with the mean and sd of ``x [N, d]`` (sd 0 read as 1), as a float32 tensor."""
    mean = x.mean(0, dtype=np.float64)
    sd = x.std(0, dtype=np.float64)
    sd[sd == 0] = 1.0
    return lambda z: torch.from_numpy(((z - mean) / sd).astype(np.float32))


def fit(module: nn.Module, inputs: torch.Tensor, loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
        cfg: ProbeConfig, params: list | None = None) -> nn.Module:
    """Adam over shuffled mini-batches of the rows of ``inputs`` (indices into the data ``loss_of``
    reads), ``cfg.epochs`` passes; returns ``module`` in eval mode."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    opt = torch.optim.Adam(params if params is not None else module.parameters(), lr=cfg.lr,
                           weight_decay=cfg.weight_decay)
    module.train()
    for _ in range(cfg.epochs):
        order = inputs[torch.randperm(len(inputs), generator=gen)]
        for start in range(0, len(order), cfg.batch_size):
            opt.zero_grad()
            loss_of(module, order[start:start + cfg.batch_size]).backward()
            opt.step()
    return module.eval()


def train_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                num_labels: int, cfg: ProbeConfig = ProbeConfig()) -> dict[str, float]:
    """Train a probe on ``x_train [N, d]`` -> ``y_train [N]`` (ints in ``[0, num_labels)``) and score
    it: ``{"accuracy": test accuracy, "train_accuracy": ...}``."""
    if len(x_train) == 0 or len(x_test) == 0:
        raise PtmError("a probe needs training and test words; the data has none")
    torch.manual_seed(cfg.seed)
    scale = standardiser(x_train)
    xt, xs = scale(x_train), scale(x_test)
    yt, ys = torch.as_tensor(y_train, dtype=torch.long), torch.as_tensor(y_test, dtype=torch.long)
    probe = make_probe(xt.shape[1], num_labels, cfg.hidden)
    ce = nn.CrossEntropyLoss()
    fit(probe, torch.arange(len(xt)), lambda m, i: ce(m(xt[i]), yt[i]), cfg)
    with torch.no_grad():
        return {"accuracy": float((probe(xs).argmax(-1) == ys).float().mean()),
                "train_accuracy": float((probe(xt).argmax(-1) == yt).float().mean())}


__all__ = ["ProbeConfig", "fit", "make_probe", "standardiser", "train_probe"]
