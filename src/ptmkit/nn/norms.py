"""The normalisation layers of a Transformer by name (``TransformerConfig.norm_type``).

``layernorm`` (Ba et al. 2016): ``(x - mean) / sqrt(var + eps) * g + b`` over the last dimension.
``rmsnorm`` (Zhang & Sennrich 2019): ``x / sqrt(mean(x^2) + eps) * g``, no centring and no bias:
cheaper, and as good in their experiments; T5 and LLaMA use it.
"""

from __future__ import annotations

from torch import nn

NORM_TYPES = ("layernorm", "rmsnorm")


def make_norm(norm_type: str, size: int, eps: float, bias: bool = True) -> nn.Module:
    """A norm over the last dimension ``size``: ``[..., size] -> [..., size]``; ``bias=False``
    drops the LayerNorm's bias (RMSNorm has none)."""
    if norm_type == "rmsnorm":
        return nn.RMSNorm(size, eps=eps)
    return nn.LayerNorm(size, eps=eps, bias=bias)


__all__ = ["NORM_TYPES", "make_norm"]
