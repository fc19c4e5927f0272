"""Where in the network a task is solved (Tenney, Das & Pavlick 2019, "BERT Rediscovers the
Classical NLP Pipeline").

* Scalar mixing weights: a probe reads ELMo's scalar mix of all layers ``0..L``
  (:class:`ptmkit.nn.scalar_mix.ScalarMix`, ``s = softmax(w)``); the *expected layer* is
  ``E_s[ℓ] = Σ_ℓ ℓ · s_ℓ``.
* Cumulative scoring: a probe on the mix of layers ``0..ℓ`` for each ``ℓ``, scored ``P(ℓ)``; the
  differential ``Δ(ℓ) = P(ℓ) - P(ℓ-1)`` and the *center of gravity* ``E_Δ[ℓ] = Σ_{ℓ≥1} ℓ Δ(ℓ) / Σ_{ℓ≥1} Δ(ℓ)``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from ptmkit.analysis.probes import ProbeConfig, fit, make_probe
from ptmkit.nn.scalar_mix import ScalarMix


def expected_layer(weights: Sequence[float]) -> float:
    """``Σ ℓ s_ℓ`` of mixing weights ``s`` (normalised here, so logits' softmax or raw shares both work
    when given as probabilities)."""
    s = np.asarray(weights, dtype=np.float64)
    return float((np.arange(len(s)) * s).sum() / s.sum())


def center_of_gravity(scores: Sequence[float]) -> float:
    """Tenney's ``E_Δ[ℓ]`` from the cumulative scores ``P(0), P(1), ..., P(L)``."""
    p = np.asarray(scores, dtype=np.float64)
    delta = np.diff(p)
    layers = np.arange(1, len(p))
    total = delta.sum()
    return float((layers * delta).sum() / total) if total != 0 else float("nan")


class MixProbe(nn.Module):
    """``[N, layers, d] -> [N, labels]``: scalar mix of the layers, then a linear or MLP probe."""

    def __init__(self, layers: int, dim: int, num_labels: int, hidden: int) -> None:
        super().__init__()
        self.mix = ScalarMix(layers)
        self.probe = make_probe(dim, num_labels, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.probe(self.mix(list(x.unbind(1))))

    def weights(self) -> list[float]:
        return torch.softmax(self.mix.weights.detach(), 0).tolist()


def _scaled(x_train: np.ndarray, *others: np.ndarray) -> list[torch.Tensor]:
    """Per layer standardisation ``[N, layers, d]`` with the training set's statistics."""
    mean = x_train.mean(0, dtype=np.float64)
    sd = x_train.std(0, dtype=np.float64)
    sd[sd == 0] = 1.0
    return [torch.from_numpy(((z - mean) / sd).astype(np.float32)) for z in (x_train, *others)]


def train_mix_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                    num_labels: int, cfg: ProbeConfig = ProbeConfig()) -> dict[str, object]:
    """A probe on the scalar mix of the layers of ``x [N, layers, d]``: its test ``accuracy``, the
    mixing ``weights`` ``s`` and their ``expected_layer``."""
    torch.manual_seed(cfg.seed)
    xt, xs = _scaled(x_train, x_test)
    yt, ys = torch.as_tensor(y_train, dtype=torch.long), torch.as_tensor(y_test, dtype=torch.long)
    model = MixProbe(xt.shape[1], xt.shape[2], num_labels, cfg.hidden)
    ce = nn.CrossEntropyLoss()
    fit(model, torch.arange(len(xt)), lambda m, i: ce(m(xt[i]), yt[i]), cfg)
    with torch.no_grad():
        acc = float((model(xs).argmax(-1) == ys).float().mean())
    w = model.weights()
    return {"accuracy": acc, "weights": w, "expected_layer": expected_layer(w)}


def cumulative_scores(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                      num_labels: int, cfg: ProbeConfig = ProbeConfig()) -> dict[str, object]:
    """``P(ℓ)``: a mix probe on layers ``0..ℓ`` for every ``ℓ``, and the center of gravity."""
    scores = [float(train_mix_probe(x_train[:, :k + 1], y_train, x_test[:, :k + 1], y_test, num_labels, cfg)["accuracy"])
              for k in range(x_train.shape[1])]
    return {"scores": scores, "center_of_gravity": center_of_gravity(scores)}


__all__ = ["MixProbe", "center_of_gravity", "cumulative_scores", "expected_layer", "train_mix_probe"]
