"""The key/value cache of causal self-attention, for incremental decoding.

A causal model's keys and values at positions ``0 .. t-1`` do not change when position ``t`` is
appended, so decoding keeps them and runs the model on the new positions only: each generated
token then costs one position per layer instead of a re-run of the whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KV = tuple[torch.Tensor, torch.Tensor]  # attention keys and values, each [B, heads, t, d]


def select_rows(kv: list[KV | None], rows: torch.Tensor) -> list[KV | None]:
    """Per layer keys and values ``[B, heads, t, d]`` -> ``[N, heads, t, d]`` whose row ``i`` is row
    ``rows[i]`` (``rows [N]`` int64; repeats allowed: ``arange(B).repeat_interleave(k)`` gives
    every row ``k`` copies).  Layers not run yet (``None``) stay ``None``."""
    return [None if layer is None else (layer[0].index_select(0, rows), layer[1].index_select(0, rows))
            for layer in kv]


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

    def select(self, rows: torch.Tensor) -> "KVCache":
        """The cache of the batch rows ``rows [N]`` (int64, repeats allowed), in that order: row
        ``i`` of every layer's keys and values, and of ``key_mask``, is row ``rows[i]`` of this one."""
        key_mask = self.key_mask.index_select(0, rows) if self.key_mask is not None else None
        return KVCache(select_rows(self.kv, rows), key_mask)
