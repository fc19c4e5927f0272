"""Packed execution of a padded batch: the position-wise work skips the padding.

A batch ``[B, T]`` padded to its longest sequence spends every position-wise operation — the
attention projections, the feed-forward network, the norms, dropout, the residual adds, about 95 %
of an encoder layer's time on a CPU — on the padding too.  In a shuffled fine-tuning batch of
sentences (lengths from a few tokens to the batch's longest) that is often half of the positions.
:class:`Packing` keeps the flat indices of the real tokens: the layers run on their packed rows
``[N, H]`` (``N`` = number of real tokens), and only attention, which needs each sequence's
positions, lays them out padded again (:meth:`Packing.pad`) and packs its output back
(:meth:`Packing.pack`).  Every real position gets what the padded computation gives it (up to
the rounding of products over fewer rows); the padding positions of the outputs hold zeros.

Packing needs the number of real tokens on the host, a synchronisation and a data-dependent shape:
it is used on CPU tensors in eager mode only (not under ``torch.compile``, tracing or ONNX export),
and only where the padding is at least :data:`MIN_PADDING` of the positions.
"""

from __future__ import annotations

import torch

from ptmkit.nn.host import host_reads_cheap

MIN_PADDING = 0.05  # below this share of padded positions, gathering costs about what packing saves


class Packing:
    """The real tokens of a padded batch.  attention_mask ``[B, T]`` (nonzero = token);
    ``index [N]``: their flat positions in ``[B * T]``, in order."""

    def __init__(self, attention_mask: torch.Tensor) -> None:
        self.batch, self.length = attention_mask.shape
        self.index = attention_mask.reshape(-1).nonzero().squeeze(1)  # [N]

    @classmethod
    def of(cls, attention_mask: torch.Tensor | None) -> Packing | None:
        """A packing of ``attention_mask [B, T]``, or ``None`` where packing does not pay or cannot
        run: no mask, less padding than :data:`MIN_PADDING` of the positions (read at each call), a
        non-CPU tensor, or a graph being captured (compile, tracing, ONNX export: their shapes must
        not depend on the data)."""
        if attention_mask is None or attention_mask.dim() != 2 or not host_reads_cheap(attention_mask):
            return None
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            return None
        if int(attention_mask.count_nonzero()) > (1.0 - MIN_PADDING) * attention_mask.numel():
            return None  # counted first: a full batch needs no index
        return cls(attention_mask)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, *] -> [N, *]``: the real positions' rows, in order."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, *] -> [B, T, *]``: the rows back at their positions, zeros at the padding."""
        rows = x.new_zeros(self.batch * self.length, *x.shape[1:])
        rows.index_copy_(0, self.index, x)  # in place: the out-of-place copy would write every row twice
        return rows.view(self.batch, self.length, *x.shape[1:])

    def pad_states(self, x: torch.Tensor, hidden: list[torch.Tensor] | None
                   ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """An encoder's packed outputs, the last state ``[N, H]`` and the per-layer states (or
        ``None``), laid out ``[B, T, H]`` again."""
        return self.pad(x), None if hidden is None else [self.pad(h) for h in hidden]


__all__ = ["MIN_PADDING", "Packing"]
