"""Multi-head self-attention over ``torch.nn.functional.scaled_dot_product_attention``, with head
gates, written-out probabilities on request (``output_attentions``), head pruning, grouped-query
attention (fewer key/value heads) and rotary position embeddings applied to queries and keys."""

from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.dropout import dropout
from ptmkit.nn.fast_linear import project
from ptmkit.nn.heads import PrunableHeads, keep_columns, keep_rows
from ptmkit.nn.kv_cache import KV, KVSlot, extend
from ptmkit.nn.packing import Packing
from ptmkit.nn.rotary import Rotary, apply_rotary


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
           dropout_p: float, scale: float | None, head_gate: torch.Tensor | None = None,
           probs: list[torch.Tensor] | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ + mask) v with dropout on the probabilities.

    q ``[B, heads, T, d]``, k and v ``[B, heads, S, d]``; mask broadcastable to
    ``[B, heads, T, S]`` (bool, True = may attend, or additive float) -> ``[B, heads, T, d]``.
    SDPA's fused kernels take no dropout on CPU, and its fallback draws the mask with the slow
    ``bernoulli_``; so with dropout on CPU the product is written out here and the probabilities
    go through :func:`ptmkit.nn.dropout.dropout` (the same memory as SDPA's fallback, less time:
    the hashed mask instead of ``bernoulli_``).  A row whose keys are all masked attends uniformly here, where SDPA returns zeros;
    such rows are padding that no loss reads.

    head_gate ``[heads]``: multiplies each head's probabilities (HF's ``head_mask``; 0 = head off).
    Gating the probabilities equals gating the head's output ``P v``, so the fused path stays fused
    and scales ``[B, heads, T, d]`` instead.  probs: a list to which the probabilities
    ``[B, heads, T, S]`` (after softmax, masking and the gate, before dropout) are appended; only
    then are they written out, on any device.
    """
    if probs is None and (dropout_p == 0.0 or q.device.type != "cpu"):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                           is_causal=is_causal and mask is None, scale=scale)
        return y if head_gate is None else y * head_gate.to(y.dtype)[:, None, None]
    p = torch.softmax(_scores(q, k, mask, is_causal, scale), dim=-1)
    if head_gate is not None:
        p = p * head_gate.to(p.dtype)[:, None, None]
    if probs is not None:
        probs.append(p)
    return dropout(p, dropout_p) @ v


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped-query attention's keys or values ``[B, kv_heads, S, d]`` -> ``[B, kv_heads * groups,
    S, d]``: key/value head ``j`` serves query heads ``j * groups .. (j + 1) * groups - 1``."""
    if groups == 1:
        return x
    B, kv, S, d = x.shape
    return x[:, :, None].expand(B, kv, groups, S, d).reshape(B, kv * groups, S, d)


def _scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
            scale: float | None) -> torch.Tensor:
    """The masked scores ``[B, heads, T, S]`` that :func:`attend` writes out (see there)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if mask is None and is_causal:
        T, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()  # top-left aligned, as SDPA's
    if mask is not None and mask.dim() == 2:  # one mask for every example and head (causal)
        return _masked_scores(q, k, mask, scale)
    s = (q * scale) @ k.transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min) if mask.dtype == torch.bool else s + mask
    return s


def _masked_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale · q kᵀ`` plus a ``[T, S]`` mask (bool: True = may attend; or additive) as one batched
    product, ``baddbmm(bias, q, kᵀ, alpha=scale)``: the mask is added as the product is written,
    where a separate masked fill and its backward each made a pass over ``[B, heads, T, S]`` (about
    2 % of a causal LM's CPU step).  q ``[B, heads, T, d]``, k ``[B, heads, S, d]`` -> ``[B, heads, T, S]``."""
    B, heads, T, d = q.shape
    S = k.shape[-2]
    dev = q.device.type
    # the product's dtype (autocast's, if on): a bias in any other dtype would be cast, and the
    # cast of its broadcast view would write all B x heads copies
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else q.dtype
    if mask.dtype == torch.bool:
        bias = torch.zeros(T, S, dtype=dtype, device=q.device).masked_fill_(~mask, torch.finfo(dtype).min)
    else:
        bias = mask.to(dtype)
    s = torch.baddbmm(bias.expand(B * heads, T, S), q.reshape(B * heads, T, d),
                      k.reshape(B * heads, S, d).transpose(1, 2), alpha=scale)
    return s.view(B, heads, T, S)


class MultiHeadSelfAttention(PrunableHeads, nn.Module):
    """Scaled dot-product attention with ``heads`` heads (Vaswani et al. 2017).

    Parameters: ``qkv.weight [3H, H]`` and ``qkv.bias [3H]`` (query, key and value projections
    stacked in that order, one matmul for all three), ``out.weight [H, H]``, ``out.bias [H]``;
    ``bias=False`` drops both biases (T5).  ``scale`` multiplies the scores ``q . k`` (default
    ``1/sqrt(d)``; T5 uses 1 and folds the factor into the initialisation of the query projection).
    The mask is data: ``forward`` takes whatever :func:`ptmkit.nn.masks.build_attention_mask`
    produced, so bidirectional, causal, padded and custom (prefix, seq2seq) attention all run
    through the same code.

    Pruning (:meth:`prune`, heads named by their original index, :mod:`ptmkit.nn.heads`) leaves
    ``h' = num_heads`` heads: ``qkv.weight [3 h' d, H]`` (still q, k, v blocks), ``out.weight
    [H, h' d]``; masks with one plane per original head are cut to the kept heads' planes.

    Grouped-query attention (Ainslie et al. 2023): ``num_kv_heads = g < heads`` key/value heads,
    each shared by ``heads / g`` consecutive query heads; ``qkv.weight [(heads + 2 g) d, H]`` (the
    query block, then the key and value blocks of ``g d`` rows each).  The keys and values, and a
    key/value cache of them, keep ``g`` heads, a ``heads / g`` smaller cache; they are repeated to
    ``heads`` only for the product.  Such heads cannot be pruned.
    """

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float = 0.0, bias: bool = True,
                 scale: float | None = None, num_kv_heads: int | None = None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.attention_dropout = attention_dropout
        self.scale = scale
        # query heads per key/value head; fixed, since grouped heads are never pruned (a pruned
        # layer without groups keeps one key/value head per query head)
        self.groups = num_heads // (num_kv_heads or num_heads)
        kv_rows = 2 * self.num_kv_heads * self.head_dim
        self.qkv = nn.Linear(hidden_size, hidden_size + kv_rows, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)
        self._init_heads(num_heads)

    @property
    def num_kv_heads(self) -> int:
        return self.num_heads // self.groups

    @property
    def grouped(self) -> bool:
        """Fewer key/value heads than query heads (grouped-query attention)."""
        return self.groups > 1

    @property
    def qkv_sizes(self) -> tuple[int, int, int]:
        """The rows of the query, key and value blocks of ``qkv``."""
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return q, kv, kv

    def _split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, T, (heads + 2 g) d]`` -> q ``[B, heads, T, d]``, k and v ``[B, g, T, d]``."""
        B, T = qkv.shape[:2]
        if not self.grouped:  # [B, T, 3, heads, d] -> [3, B, heads, T, d]
            q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            return q, k, v
        q, k, v = qkv.split(self.qkv_sizes, dim=-1)
        return (q.view(B, T, self.num_heads, self.head_dim).transpose(1, 2),
                k.view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2),
                v.view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2))

    def prune(self, heads: Iterable[int]) -> None:
        heads = list(heads)
        if self.grouped and set(heads) - (set(range(self.total_heads)) - set(self.kept_heads)):
            raise PtmError(f"heads of grouped-query attention (num_kv_heads={self.num_kv_heads} < num_heads="
                           f"{self.total_heads}) cannot be pruned: query heads share their keys and values")
        super().prune(heads)

    def _keep(self, local: list[int]) -> None:
        device = self.qkv.weight.device
        keep_rows(self.qkv, self.rows(local, 3, device))
        keep_columns(self.out, self.rows(local, 1, device))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False,
                head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None,
                packing: Packing | None = None, rotary: Rotary | None = None) -> torch.Tensor:
        """x: ``[B, T, H]``; mask: broadcastable to ``[B, heads, T, T]`` or ``None`` -> ``[B, T, H]``.
        head_gate ``[total_heads]``, probs: see :func:`attend` (``probs`` receives ``[B, h', T, T]``).
        packing: ``x`` holds the real tokens' rows ``[N, H]`` of a padded batch
        (:mod:`ptmkit.nn.packing`), and so does the output; the projections run on those rows only.
        rotary: RoPE's ``(cos, sin)`` ``[B or 1, 1, T, d]`` (:mod:`ptmkit.nn.rotary`), applied to the
        queries and keys."""
        qkv = project(self.qkv, x)
        if packing is not None:
            qkv = packing.pad(qkv)  # [B, T, 3 h d], zeros at the padding (masked as keys, dropped as queries)
        B, T = qkv.shape[:2]
        if self.pruned:
            mask, head_gate = self.head_slice(mask), self.gate(head_gate)
        q, k, v = self._split(qkv)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)
        y = attend(q, k, v, mask, is_causal, self.attention_dropout if self.training else 0.0, self.scale,
                   head_gate, probs)
        y = y.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)
        return project(self.out, y if packing is None else packing.pack(y))

    def forward_cached(
        self, x: torch.Tensor, past: KV | KVSlot | None, mask: torch.Tensor | None = None,
        head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None,
        rotary: Rotary | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Attention for incremental decoding: the ``T`` new positions of ``x [B, T, H]`` attend to
        the cached keys/values ``past`` (each ``[B, heads, t0, d]``, or ``None`` for ``t0 = 0``; or a
        :class:`~ptmkit.nn.kv_cache.KVSlot`, whose store the new ones are written into) and to
        themselves.  mask: broadcastable to ``[B, heads, T, t0 + T]`` (bool, True = may attend), or
        ``None`` for plain causal attention over all keys.  Returns ``[B, T, H]`` and
        the extended keys/values ``[B, heads, t0 + T, d]`` (``num_kv_heads`` of them with grouped-query
        attention); head_gate / probs as in :meth:`forward`; rotary: the new positions' angles
        ``[B or 1, 1, T, d]``, applied before the keys are cached."""
        B, T, H = x.shape
        if self.pruned:
            mask, head_gate = self.head_slice(mask), self.gate(head_gate)
        q, k, v = self._split(project(self.qkv, x))
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        k, v = extend(past, (k, v))  # in place when ``past`` is a slot of a cache with room, else copied
        cached = k, v
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)
        is_causal = False
        if mask is None and T > 1:
            t0 = k.shape[2] - T
            if t0 == 0:
                is_causal = True
            else:  # query i (position t0 + i) sees keys j <= t0 + i
                mask = torch.ones(T, t0 + T, dtype=torch.bool, device=x.device).tril(t0)
        y = attend(q, k, v, mask, is_causal, self.attention_dropout if self.training else 0.0, self.scale,
                   head_gate, probs)
        return project(self.out, y.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)), cached
