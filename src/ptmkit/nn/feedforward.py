"""Position-wise feed-forward network: ``fc2(act(fc1(x)))`` (Vaswani et al. 2017)."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.nn.activations import get_activation


class FeedForward(nn.Module):
    """``x [B, T, H] -> [B, T, H]`` through an inner size ``I``.

    Parameters: ``fc1.weight [I, H]``, ``fc1.bias [I]``, ``fc2.weight [H, I]``, ``fc2.bias [H]``.
    The output dropout belongs to the residual connection (see ``TransformerLayer``).
    """

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "gelu") -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)
        self.act = get_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))
