"""Scoring text with a softmax over the vocabulary: the log-probability of given targets."""

from __future__ import annotations

import torch


def next_token_log_probs(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                         chunk: int = 4096) -> torch.Tensor:
    """``log softmax(h W^T + b)[target]`` for ``h [B, N, D]``, ``weight [V, D]``, ``targets [B, N]``
    -> ``[B, N]``, ``chunk`` positions at a time so that only ``[chunk, V]`` logits exist at once."""
    flat, tgt = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    parts = []
    for i in range(0, flat.shape[0], chunk):
        logits = flat[i : i + chunk].float() @ weight.float().t()
        if bias is not None:
            logits = logits + bias.float()
        parts.append(torch.log_softmax(logits, dim=-1).gather(1, tgt[i : i + chunk, None]).squeeze(1))
    if not parts:
        return h.new_zeros(targets.shape, dtype=torch.float32)
    return torch.cat(parts).view(targets.shape)
