"""The layers of the encoder–decoder (:mod:`ptmkit.encoders.encoder_decoder`): the decoder's
key/value cache, its causal self-attention and cross-attention (both with prunable heads), the
encoder and decoder layers (post-LN as BART, pre-LN with RMS norms as T5) and a stack of them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.encoders.encoder_decoder_config import (
    KV,
    POSITION_OFFSET,
    EncoderDecoderConfig,
)
from ptmkit.nn.attention import MultiHeadSelfAttention, attend
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.heads import PrunableHeads, keep_columns, keep_rows
from ptmkit.nn.packing import Packing
from ptmkit.nn.positions import RelativePositionBias


@dataclass
class DecoderCache:
    """Incremental decoding state.

    self_kv: per decoder layer, the self-attention keys and values ``[B, h, t, d]`` of the ``t``
    positions decoded so far; cross_kv: per layer, the cross-attention keys and values
    ``[B, h, S, d]`` of the encoder states (projected once); cross_mask: the source padding mask
    ``[B, 1, 1, S]`` (bool) or ``None``.
    """

    self_kv: list[KV | None]
    cross_kv: list[KV]
    cross_mask: torch.Tensor | None

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the next position's index)."""
        first = self.self_kv[0] if self.self_kv else None
        return 0 if first is None else int(first[0].shape[2])


def _merge(y: torch.Tensor) -> torch.Tensor:
    """``[B, h, T, d] -> [B, T, H]``."""
    B, h, T, d = y.shape
    return y.transpose(1, 2).reshape(B, T, h * d)


class DecoderSelfAttention(MultiHeadSelfAttention):
    """Causal self-attention (the parameters of :class:`MultiHeadSelfAttention`) with a step that
    extends cached keys and values, for incremental decoding."""

    def step(self, x: torch.Tensor, past: KV | None, position_bias: torch.Tensor | None = None,
             head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, KV]:
        """x ``[B, T, H]`` at positions ``t0 .. t0 + T - 1`` where ``t0`` = the cached length;
        past: keys/values ``[B, h, t0, d]`` or ``None``; position_bias: an additive float mask
        ``[1, h, T, t0 + T]`` (relative positions, causal pattern included) or ``None``.  Returns
        ``[B, T, H]`` and the keys/values ``[B, h, t0 + T, d]``; head_gate / probs as in
        :meth:`MultiHeadSelfAttention.forward`."""
        B, T, H = x.shape
        if self.pruned:
            position_bias, head_gate = self.head_slice(position_bias), self.gate(head_gate)
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        t0 = 0
        if past is not None:
            t0 = past[0].shape[2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        mask, is_causal = None, False
        if T > 1:
            if t0 == 0:
                is_causal = True
            else:  # query i (position t0 + i) sees keys j <= t0 + i
                mask = torch.ones(T, t0 + T, dtype=torch.bool, device=x.device).tril(t0)
        dropout = self.attention_dropout if self.training else 0.0
        if position_bias is not None:  # [1, h, T, t0 + T], already holding the causal pattern
            mask, is_causal = position_bias, False
        y = attend(q, k, v, mask, is_causal, dropout, self.scale, head_gate, probs)
        return self.out(_merge(y)), (k, v)


class CrossAttention(PrunableHeads, nn.Module):
    """Decoder queries attend to encoder states.  Parameters: ``q.{weight [H, H], bias [H]}``,
    ``kv.{weight [2H, H], bias [2H]}`` (key and value projections stacked, one matmul for both),
    ``out.{weight [H, H], bias [H]}``; pruned to ``h'`` heads: ``q [h' d, H]``, ``kv [2 h' d, H]``,
    ``out [H, h' d]``."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float = 0.0, bias: bool = True,
                 scale: float | None = None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.attention_dropout = attention_dropout
        self.scale = scale
        self.q = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.kv = nn.Linear(hidden_size, 2 * hidden_size, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)
        self._init_heads(num_heads)

    def _keep(self, local: list[int]) -> None:
        device = self.q.weight.device
        keep_rows(self.q, self.rows(local, 1, device))
        keep_rows(self.kv, self.rows(local, 2, device))
        keep_columns(self.out, self.rows(local, 1, device))

    def project_memory(self, memory: torch.Tensor) -> KV:
        """Encoder states ``[B, S, H]`` -> keys and values ``[B, h, S, d]`` each."""
        B, S, H = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return k, v

    def forward(self, y: torch.Tensor, kv: KV, mask: torch.Tensor | None, head_gate: torch.Tensor | None = None,
                probs: list[torch.Tensor] | None = None, packing: Packing | None = None) -> torch.Tensor:
        """y ``[B, T, H]``; kv from :meth:`project_memory`; mask ``[B, 1, 1, S]`` (bool, True = may
        attend) or ``None`` -> ``[B, T, H]``; head_gate ``[total_heads]`` / probs (receives
        ``[B, h, T, S]``) as in :meth:`MultiHeadSelfAttention.forward`.  packing: ``y`` and the
        output are the real decoder positions' rows ``[N, H]`` (:mod:`ptmkit.nn.packing`)."""
        q = self.q(y)
        if packing is not None:
            q = packing.pad(q)  # [B, T, h d]: zero queries at the padding, dropped again below
        B, T, _ = q.shape
        q = q.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0
        out = _merge(attend(q, kv[0], kv[1], mask, False, dropout, self.scale, self.gate(head_gate), probs))
        return self.out(out if packing is None else packing.pack(out))


def _ffn(ffn: FeedForward, x: torch.Tensor, act_dropout: Dropout) -> torch.Tensor:
    """BART's FFN: ``fc2(dropout(act(fc1(x))))`` with the FFN's own parameters (T5 v1.1:
    ``fc2(dropout(act(fc1(x)) * fc1_linear(x)))``)."""
    return ffn.fc2(act_dropout(ffn.inner(x)))


def make_norm(cfg: EncoderDecoderConfig) -> nn.Module:
    """LayerNorm (BART) or RMS norm (T5: no mean subtraction, no bias) over ``H``."""
    if cfg.norm_type == "rms":
        return nn.RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)


def _attention_scale(cfg: EncoderDecoderConfig) -> float | None:
    return None if cfg.scale_attention else 1.0  # None: SDPA's default 1/sqrt(d)


class EncoderLayer(nn.Module):
    """Post-LN block: ``x = LN(x + drop(SelfAttn(x)))``; ``x = LN(x + drop(FFN(x)))``; ``[B, S, H]``
    (pre-LN with ``norm="pre"``: ``x = x + drop(SelfAttn(LN(x)))``, ``x = x + drop(FFN(LN(x)))``)."""

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.attn = MultiHeadSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, cfg.bias,
                                           _attention_scale(cfg))
        self.attn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation, cfg.bias, cfg.gated_ffn)
        self.ffn_norm = make_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.act_dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
                head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None,
                packing: Packing | None = None) -> torch.Tensor:
        """head_gate ``[heads]`` / probs / packing (``x`` is the real tokens' rows ``[N, H]``): see
        :meth:`MultiHeadSelfAttention.forward`."""
        if not self.pre:  # BART: the original expressions, unchanged
            x = self.attn_norm(x + self.dropout(self.attn(x, mask, is_causal, head_gate, probs, packing)))
            return self.ffn_norm(x + self.dropout(_ffn(self.ffn, x, self.act_dropout)))
        x = x + self.dropout(self.attn(self.attn_norm(x), mask, is_causal, head_gate, probs, packing))
        return x + self.dropout(_ffn(self.ffn, self.ffn_norm(x), self.act_dropout))


class DecoderLayer(nn.Module):
    """Post-LN (or pre-LN) block: causal self-attention, cross-attention over the encoder, FFN; ``[B, T, H]``."""

    # The decoder projects the encoder states into every layer's cross-attention keys and values
    # before the first layer runs (once per sequence, kept in the generation cache), so a layer's
    # weights are used outside its forward: FSDP keeps them with the enclosing unit (ptmkit.train.sharding).
    shard_alone = False

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        H = cfg.hidden_size
        self.pre = cfg.norm == "pre"
        scale = _attention_scale(cfg)
        self.self_attn = DecoderSelfAttention(H, cfg.num_heads, cfg.attention_dropout, cfg.bias, scale)
        self.self_attn_norm = make_norm(cfg)
        self.cross_attn = CrossAttention(H, cfg.num_heads, cfg.attention_dropout, cfg.bias, scale)
        self.cross_attn_norm = make_norm(cfg)
        self.ffn = FeedForward(H, cfg.intermediate_size, cfg.activation, cfg.bias, cfg.gated_ffn)
        self.ffn_norm = make_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.act_dropout = Dropout(cfg.activation_dropout)

    def forward(
        self,
        y: torch.Tensor,
        self_mask: torch.Tensor | None,
        is_causal: bool,
        memory_kv: KV,
        cross_mask: torch.Tensor | None,
        past: KV | None = None,
        use_cache: bool = False,
        self_gate: torch.Tensor | None = None,
        cross_gate: torch.Tensor | None = None,
        self_probs: list[torch.Tensor] | None = None,
        cross_probs: list[torch.Tensor] | None = None,
        packing: Packing | None = None,
    ) -> tuple[torch.Tensor, KV | None]:
        """y ``[B, T, H]``; self_mask / is_causal: the decoder's own attention pattern (ignored when
        caching without relative positions: positions are causal by construction; with them, the
        cached step's mask is the position bias ``[1, h, T, t0 + T]``); memory_kv: the encoder
        states' keys and values for this layer; cross_mask ``[B, 1, 1, S]`` or ``None``.  Returns
        ``[B, T, H]`` and, with ``use_cache``, this layer's self-attention keys/values so far.
        self_gate / cross_gate ``[heads]`` and self_probs / cross_probs (lists the probabilities are
        appended to): each attention's head gates and probabilities.  packing (not with
        ``use_cache``): ``y`` and the output are the real positions' rows ``[N, H]``
        (:mod:`ptmkit.nn.packing`)."""
        if not self.pre:  # BART: the original expressions, unchanged
            if use_cache:
                a, kv = self.self_attn.step(y, past, None, self_gate, self_probs)
            else:
                a, kv = self.self_attn(y, self_mask, is_causal, self_gate, self_probs, packing), None
            y = self.self_attn_norm(y + self.dropout(a))
            y = self.cross_attn_norm(y + self.dropout(self.cross_attn(y, memory_kv, cross_mask, cross_gate, cross_probs,
                                                                      packing)))
            return self.ffn_norm(y + self.dropout(_ffn(self.ffn, y, self.act_dropout))), kv
        h = self.self_attn_norm(y)
        if use_cache:
            a, kv = self.self_attn.step(h, past, self_mask, self_gate, self_probs)
        else:
            a, kv = self.self_attn(h, self_mask, is_causal, self_gate, self_probs, packing), None
        y = y + self.dropout(a)
        y = y + self.dropout(self.cross_attn(self.cross_attn_norm(y), memory_kv, cross_mask, cross_gate, cross_probs,
                                             packing))
        return y + self.dropout(_ffn(self.ffn, self.ffn_norm(y), self.act_dropout)), kv


class _Stack(nn.Module):
    """One half's position table (or relative position bias), embedding LayerNorm, layers and
    (pre-LN) final norm."""

    def __init__(self, cfg: EncoderDecoderConfig, layer: type, n: int, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        absolute = cfg.positions == "absolute"
        self.position_embeddings = nn.Embedding(cfg.max_position + POSITION_OFFSET, cfg.hidden_size) if absolute else None
        self.relative_bias = (None if absolute else
                              RelativePositionBias(cfg.num_heads, cfg.relative_buckets, cfg.relative_max_distance))
        self.embedding_norm = make_norm(cfg) if cfg.embedding_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(layer(cfg) for _ in range(n))
        self.final_norm = make_norm(cfg) if cfg.norm == "pre" else None

    def embed(self, tokens: torch.Tensor, start: int = 0, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[B, T, H]`` (already scaled) at positions ``start .. start + T - 1``,
        or at explicit ``position_ids [B, T]`` -> the first layer's input ``[B, T, H]``.  Without a
        position table (relative positions) the tokens enter as they are."""
        x = tokens
        if position_ids is not None:  # e.g. MASS: a span's tokens at their places in the sentence
            x = tokens + self.position_embeddings(position_ids + POSITION_OFFSET)
        elif self.position_embeddings is not None:
            T = tokens.shape[1]
            lo = start + POSITION_OFFSET
            x = tokens + self.position_embeddings.weight[lo : lo + T]  # [T, H] broadcast over the batch
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        return self.dropout(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The stack's output: pre-LN stacks end in a norm and dropout (T5), post-LN ones as they are."""
        return x if self.final_norm is None else self.dropout(self.final_norm(x))

    def position_mask(self, mask: torch.Tensor | None, is_causal: bool, q_len: int, k_len: int,
                      dtype: torch.dtype, q_start: int = 0) -> tuple[torch.Tensor | None, bool]:
        """Fold the relative position bias (computed once, shared by every layer) into the
        attention mask from :func:`build_attention_mask`: ``[B|1, h, T_q, T_k]`` float, with masked
        keys at the dtype minimum.  Without relative positions the mask is returned as is."""
        if self.relative_bias is None:
            return mask, is_causal
        device = self.relative_bias.bias.weight.device
        bias = self.relative_bias(q_len, k_len, self.bidirectional, device, q_start).to(dtype)  # [1, h, Tq, Tk]
        if is_causal:  # the fast path's implicit causal mask, made explicit
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(q_start)
        if mask is None:
            return bias, False
        if mask.dtype == torch.bool:
            return bias.masked_fill(~mask, torch.finfo(dtype).min), False
        return bias + mask, False
