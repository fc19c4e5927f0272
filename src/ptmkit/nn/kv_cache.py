"""The key/value cache of causal self-attention, for incremental decoding.

A causal model's keys and values at positions ``0 .. t-1`` do not change when position ``t`` is
appended, so decoding keeps them and runs the model on the new positions only: each generated
token then costs one position per layer instead of a re-run of the whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KV = tuple[torch.Tensor, torch.Tensor]  # attention keys and values, each [B, heads, t, d]


@dataclass
class KVCache:
    """kv: per layer, the self-attention keys and values ``[B, heads, t, d]`` of the ``t``
    positions seen so far (``None`` before the first call); key_mask: ``[B, t]`` bool, True
    where a cached position is a real token (``False`` at left padding), or ``None`` when every
    cached position is real."""

    kv: list[KV | None]
    key_mask: torch.Tensor | None = None

    @classmethod
    def empty(cls, num_layers: int) -> "KVCache":
        return cls([None] * num_layers, None)

    @property
    def length(self) -> int:
        """Number of positions cached (the next position's index in the padded batch)."""
        first = self.kv[0] if self.kv else None
        return 0 if first is None else int(first[0].shape[2])
