"""Attention masks as data.

Every encoder receives its attention structure as a tensor (or ``None`` plus an ``is_causal``
flag for the fast path), never as a model-type switch.  Conventions follow
``torch.nn.functional.scaled_dot_product_attention``: a boolean mask is ``True`` where a query
may attend to a key; a float mask is added to the attention scores.
"""

from __future__ import annotations

import torch

from ptmkit.errors import PtmError


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """Lower-triangular boolean mask ``[T, T]``: query ``i`` sees keys ``j <= i``."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def _no_empty_rows(mask: torch.Tensor) -> torch.Tensor:
    """Let a query that may attend to nothing attend to every key instead.

    A fully masked row would make softmax return NaN, which then spreads to every position
    through the next layer's attention and through the gradients.  Such rows belong to padding
    and their outputs are ignored by every loss, so any finite value is correct.
    """
    return mask | ~mask.any(dim=-1, keepdim=True)


def build_attention_mask(
    attention_mask: torch.Tensor | None,
    attn_mask: torch.Tensor | None,
    causal: bool,
    length: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor | None, bool]:
    """Combine a padding mask, an explicit mask and causality into what SDPA takes.

    attention_mask: ``[B, T]``, 1 = token, 0 = padding (keys at padding are hidden), or ``None``.
    attn_mask: explicit mask ``[B or 1, heads or 1, T, T]`` (boolean, True = may attend; or
        additive float); overrides ``causal``.
    Returns ``(mask, is_causal)``: ``mask`` is ``None`` when nothing needs masking (the fast path,
    with ``is_causal=True`` for a plain causal model), else a boolean ``[B, 1, 1 or T, T]`` or
    ``[B|1, heads|1, T, T]`` mask, or a float mask with ``-inf`` clamped to the dtype minimum.
    """
    key_padding = None
    if attention_mask is not None:
        if attention_mask.shape[-1] != length or attention_mask.dim() != 2:
            raise PtmError(
                f"attention_mask has shape {tuple(attention_mask.shape)}, expected [batch, {length}]"
            )
        keep = attention_mask.bool()
        # all-ones padding masks take the mask-free fast path; a compiled graph keeps the mask
        # (reading keep.all() back would break the graph)
        if torch.compiler.is_compiling() or not bool(keep.all()):
            key_padding = keep[:, None, None, :]  # [B, 1, 1, T]

    if attn_mask is not None:
        if attn_mask.dim() != 4 or attn_mask.shape[-2:] != (length, length):
            raise PtmError(
                f"attn_mask has shape {tuple(attn_mask.shape)}, expected [batch or 1, heads or 1, {length}, {length}]"
            )
        if attn_mask.dtype == torch.bool:
            mask = attn_mask if key_padding is None else attn_mask & key_padding
            return _no_empty_rows(mask), False
        # Additive mask: -inf rows would give NaN, the dtype minimum gives a uniform row instead.
        mask = attn_mask.to(dtype).clamp(min=torch.finfo(dtype).min)
        if key_padding is not None:
            mask = mask.masked_fill(~key_padding, torch.finfo(dtype).min)
        return mask, False

    if key_padding is None:
        return None, causal
    if causal:
        mask = causal_mask(length, key_padding.device)[None, None] & key_padding  # [B, 1, T, T]
        return _no_empty_rows(mask), False
    return _no_empty_rows(key_padding), False
