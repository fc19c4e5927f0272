"""Rotary position embeddings, RoPE (Su et al. 2021, RoFormer).

Each query and key vector is rotated by an angle proportional to its position before the scores
are taken: pair ``p`` of dimensions turns by ``position * theta^(-2p / d)``.  A rotation preserves
lengths, and the product of a query rotated by ``m`` and a key rotated by ``n`` depends on ``m - n``
only, so the scores see relative positions while nothing is added to the token embeddings and no
position table limits the length.

The pairs are dimensions ``(p, p + d/2)`` (the two halves of a head), the layout of GPT-NeoX and of
LLaMA's released weights in HF transformers; the paper pairs neighbours ``(2p, 2p + 1)``, which is
the same rotation with the head's dimensions permuted.  Keys are rotated before they are cached,
so a decoding step rotates only its own positions.
"""

from __future__ import annotations

import torch

Rotary = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each [B or 1, 1, T, d]


def rotary_angles(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Rotary:
    """``cos`` and ``sin`` of the rotation angles at ``positions [B or 1, T]`` (int): each
    ``[B or 1, 1, T, d]`` in ``dtype``, the ``d/2`` frequencies repeated for the two halves.

    The angles are computed in float32 (float64 when ``dtype`` is): position times frequency
    reaches thousands of radians, which bfloat16 could not resolve."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim)  # [d/2]
    angles = positions.to(work)[..., None] * inv_freq  # [B or 1, T, d/2]
    angles = torch.cat([angles, angles], dim=-1)[:, None]  # [B or 1, 1, T, d]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, rotary: Rotary) -> torch.Tensor:
    """Rotate ``x [B, heads, T, d]`` by the angles ``rotary`` (:func:`rotary_angles`): each pair
    ``(x1, x2)`` of the two halves becomes ``(x1 cos - x2 sin, x2 cos + x1 sin)``."""
    cos, sin = (t.to(x.dtype) for t in rotary)  # under autocast the projections' dtype, not the angles'
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


__all__ = ["Rotary", "apply_rotary", "rotary_angles"]
