"""Relative position buckets and biases (Shaw et al. 2018; Raffel et al. 2020, T5).

Instead of adding a position vector to each input, every attention score ``q_i . k_j`` gets a
learned scalar per head that depends only on the offset ``j - i``.  Offsets are put into
``num_buckets`` buckets: half of them exact small offsets, the rest logarithmically wider up to
``max_distance`` (beyond it all offsets share the last bucket); bidirectional attention spends
half the buckets on each sign.  T5 computes the bias once and shares it across layers.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_bucket(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket index ``[...]`` (int64, in ``[0, num_buckets)``) of each offset ``relative = j - i``."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative > 0).long() * num_buckets
        n = relative.abs()
    else:
        n = (-relative).clamp(min=0)  # causal: only the past (j <= i) is ever attended to
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # log-spaced buckets for max_exact <= n < max_distance
    large = max_exact + (
        torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(is_small, n, large)


class RelativePositionBias(nn.Module):
    """``(T_q, T_k) -> [1, heads, T_q, T_k]`` additive attention bias; parameter ``bias.weight [buckets, heads]``."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, q_len: int, k_len: int, bidirectional: bool, device: torch.device | None = None,
                q_start: int = 0) -> torch.Tensor:
        """Queries at positions ``q_start .. q_start + q_len - 1`` (later steps of incremental
        decoding), keys at ``0 .. k_len - 1``."""
        q = torch.arange(q_start, q_start + q_len, device=device)[:, None]
        k = torch.arange(k_len, device=device)[None, :]
        buckets = relative_position_bucket(k - q, bidirectional, self.num_buckets, self.max_distance)
        return self.bias(buckets).permute(2, 0, 1).unsqueeze(0)  # [1, heads, T_q, T_k]

    def at(self, positions: torch.Tensor, bidirectional: bool) -> torch.Tensor:
        """The bias between tokens at the given ``positions [B or 1, T]`` (not ``0 .. T - 1``: XLM's
        translation LM restarts them for the second sentence): ``[B or 1, heads, T, T]``."""
        relative = positions[:, None, :] - positions[:, :, None]  # key position - query position
        buckets = relative_position_bucket(relative, bidirectional, self.num_buckets, self.max_distance)
        return self.bias(buckets).permute(0, 3, 1, 2)
