"""Position-wise feed-forward network: ``fc2(act(fc1(x)))`` (Vaswani et al. 2017)."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.nn.activations import get_activation
from ptmkit.nn.fast_linear import project


class FeedForward(nn.Module):
    """``x [B, T, H] -> [B, T, H]`` through an inner size ``I``.

    Parameters: ``fc1.weight [I, H]``, ``fc1.bias [I]``, ``fc2.weight [H, I]``, ``fc2.bias [H]``;
    ``bias=False`` drops the biases (T5).  ``gated=True`` is a GLU variant (Shazeer 2020, T5 v1.1's
    gated-GELU): ``fc2(act(fc1(x)) * fc1_linear(x))`` with a second input projection
    ``fc1_linear.weight [I, H]`` (and ``fc1_linear.bias [I]``).
    The output dropout belongs to the residual connection (see ``TransformerLayer``).
    """

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "gelu", bias: bool = True,
                 gated: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.fc1_linear = nn.Linear(hidden_size, intermediate_size, bias=bias) if gated else None
        self.fc2 = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.activation = activation
        self.act = get_activation(activation)

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., H] -> [..., I]``: the activated inner representation (gated when configured).
        Without autograd on CPU the product and the activation are one oneDNN call
        (:mod:`ptmkit.nn.fast_linear`)."""
        h = project(self.fc1, x, self.activation, self.act)
        return h if self.fc1_linear is None else h * project(self.fc1_linear, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(self.fc2, self.inner(x))
