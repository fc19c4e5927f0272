"""ELMo's scalar mix (Peters et al. 2018, eq. 1): a task-specific weighting of all layers.

``ELMo_k = γ · Σ_j s_j · h_{k,j}`` with ``s = softmax(w)``: the task learns how much of each
layer (the token layer and every encoder layer) it uses, and ``γ`` scales the whole vector.
Parameters: ``weights [L+1]`` (start at 0, i.e. an equal mix) and ``gamma`` (starts at 1).
"""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    """``num_layers`` tensors ``[B, T, H]`` -> one ``[B, T, H]``."""

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> torch.Tensor:
        if len(layers) != self.weights.numel():
            raise ValueError(f"ScalarMix over {self.weights.numel()} layers got {len(layers)}")
        s = torch.softmax(self.weights, dim=0)
        return self.gamma * sum(w * h for w, h in zip(s, layers))
