"""One vector per sequence from an encoder's token states: the sentence poolings that ``ptm
encode`` offers and that sentence-embedding fine-tuning trains, in one place so that both read a
model's vectors the same way."""

from __future__ import annotations

import torch

POOLINGS = ("mean", "cls", "last")


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """``[B, H]`` from states ``hidden [B, T, H]`` and the padding mask ``mask [B, T]`` (right padding):
    ``mean`` over the real tokens (special tokens included, as sentence-transformers' mean pooling),
    ``cls`` the first token's state, ``last`` the last real token's state."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "last":
        last = mask.long().sum(dim=1).clamp(min=1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    m = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


__all__ = ["POOLINGS", "pool"]
