"""Head gates: HF's ``head_mask`` for the attention encoders.

A head gate ``ξ_h`` multiplies head ``h``'s attention probabilities (0 = the head is off, 1 =
unchanged); Michel et al. (2019) score a head's importance by ``|∂L/∂ξ_h|`` at ``ξ = 1``.
"""

from __future__ import annotations

import torch

from ptmkit.errors import PtmError


def head_gates(head_mask: torch.Tensor | None, num_layers: int, num_heads: int,
               name: str = "head_mask") -> list[torch.Tensor] | None:
    """Check a head mask and split it per layer: ``[num_layers, num_heads]``, or ``[num_heads]`` for
    the same gates in every layer -> ``num_layers`` tensors ``[num_heads]`` (views: gradients reach
    ``head_mask``), or ``None`` without a mask.  A non-float mask (bool, int) is read as 0/1 floats."""
    if head_mask is None:
        return None
    if not isinstance(head_mask, torch.Tensor):
        raise PtmError(f"{name} must be a tensor [{num_layers}, {num_heads}] (layers, heads), got {type(head_mask).__name__}")
    shape = tuple(head_mask.shape)
    if shape not in ((num_layers, num_heads), (num_heads,)):
        raise PtmError(
            f"{name} has shape {list(shape)}; expected [{num_layers}, {num_heads}] (layers, heads) or "
            f"[{num_heads}] (the same gates in every layer)"
        )
    if not head_mask.is_floating_point():
        head_mask = head_mask.float()
    if head_mask.dim() == 1:
        return [head_mask] * num_layers
    return list(head_mask.unbind(0))


def no_heads_error(encoder: str) -> PtmError:
    """The error of an encoder without attention (LSTMs, static vectors) asked for heads."""
    return PtmError(
        f"the {encoder} encoder has no attention heads: output_attentions and head_mask need an "
        f"attention encoder (transformer, encoder_decoder, xlnet)"
    )
