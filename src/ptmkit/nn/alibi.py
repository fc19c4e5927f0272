"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long").

No position embeddings; every attention score ``q_i . k_j`` is penalised in proportion to the
distance between query and key, ``-m_h |i - j|``, with a fixed slope ``m_h`` per head (nothing is
learned).  The slopes form a geometric sequence, so the heads look at different ranges: for ``n``
heads (a power of two) ``m_h = 2^(-8 h / n)``, ``h = 1 .. n``.

In causal attention only keys ``j <= i`` are read, where ``-m |i - j| = -m (i - j)``, the paper's
causal form; the same bias therefore serves both directions.  Shifting every position by the same
amount (left padding) leaves the bias unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The heads' slopes ``[num_heads]`` (float64).  For a head count that is not a power of two,
    the paper's recipe: the slopes of the nearest smaller power of two ``p``, then every other
    slope of ``2p`` heads (the ones that interleave with the first set) until ``num_heads``."""
    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = _power_of_two_slopes(p)
    if p < num_heads:
        slopes += _power_of_two_slopes(2 * p)[0::2][:num_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


class AlibiBias(nn.Module):
    """``(T_q, T_k) -> [1, heads, T_q, T_k]`` additive attention bias ``-m_h |i - j|`` (float32);
    the interface of :class:`ptmkit.nn.positions.RelativePositionBias`, with no parameters (the
    slopes are recomputed on each call rather than kept as a buffer, so a model cast to bfloat16
    keeps them exact)."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads

    def slopes(self, device: torch.device | None) -> torch.Tensor:
        return alibi_slopes(self.num_heads).to(device=device, dtype=torch.float32)[:, None, None]  # [heads, 1, 1]

    def forward(self, q_len: int, k_len: int, bidirectional: bool = True, device: torch.device | None = None,
                q_start: int = 0) -> torch.Tensor:
        """Queries at positions ``q_start .. q_start + q_len - 1``, keys at ``0 .. k_len - 1``;
        ``bidirectional`` is accepted for the common interface (one bias serves both, see above)."""
        q = torch.arange(q_start, q_start + q_len, device=device)[:, None]
        k = torch.arange(k_len, device=device)[None, :]
        return (-self.slopes(device) * (k - q).abs())[None]  # [1, heads, T_q, T_k]

    def at(self, positions: torch.Tensor, bidirectional: bool = True) -> torch.Tensor:
        """The bias between tokens at ``positions [B or 1, T]``: ``[B or 1, heads, T, T]``."""
        distance = (positions[:, None, :] - positions[:, :, None]).abs()  # [B or 1, T, T]
        return -self.slopes(positions.device)[None] * distance[:, None]


__all__ = ["AlibiBias", "alibi_slopes"]
