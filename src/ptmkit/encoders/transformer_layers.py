"""The building blocks of the Transformer encoder (:mod:`ptmkit.encoders.transformer`): the
embedding layer, one layer (attention and feed-forward sub-layers with residual connections), the
stack of layers with ALBERT's sharing, and BERT's pooler."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.encoders.transformer_config import TransformerConfig
from ptmkit.nn.attention import MultiHeadSelfAttention
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.kv_cache import KV, KVSlot
from ptmkit.nn.norms import make_norm
from ptmkit.nn.packing import Packing
from ptmkit.nn.rotary import Rotary


class Embeddings(nn.Module):
    """``input_ids [B, T] -> [B, T, H]``: token (+ absolute position) (+ segment) embeddings of
    width E, optional norm, dropout, and a projection E -> H when factorized (ALBERT)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        E = cfg.embedding_dim
        self.word_embeddings = nn.Embedding(cfg.vocab_size, E)
        self.position_embeddings = nn.Embedding(cfg.max_position, E) if cfg.positions == "absolute" else None
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, E) if cfg.type_vocab_size > 0 else None
        self.norm = make_norm(cfg.norm_type, E, cfg.layer_norm_eps, cfg.bias) if cfg.embedding_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.project = nn.Linear(E, cfg.hidden_size, bias=cfg.bias) if E != cfg.hidden_size else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            if position_ids is None:
                x = x + self.position_embeddings.weight[:T]  # [T, E] broadcast over the batch, no gather
            else:
                x = x + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # every token in segment 0
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        return self.project(x) if self.project is not None else x


class TransformerLayer(nn.Module):
    """One block: self-attention and feed-forward sub-layers, each with a residual connection.

    post-LN (BERT):  ``h = LN(x + drop(attn(x)))``; ``y = LN(h + drop(ffn(h)))``.
    pre-LN (GPT-2):  ``h = x + drop(attn(LN(x)))``; ``y = h + drop(ffn(LN(h)))``.

    ``LN`` is the config's ``norm_type`` (LayerNorm or RMSNorm); the feed-forward network is the
    plain one or SwiGLU (``ffn``); the attention has ``num_kv_heads`` key/value heads.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        H = cfg.hidden_size
        self.attn = MultiHeadSelfAttention(H, cfg.num_heads, cfg.attention_dropout, cfg.bias,
                                           num_kv_heads=cfg.num_kv_heads)
        self.attn_norm = make_norm(cfg.norm_type, H, cfg.layer_norm_eps, cfg.bias)
        if cfg.ffn == "swiglu":  # Shazeer 2020: fc1 is the gate W, fc1_linear the up projection V, fc2 down
            self.ffn = FeedForward(H, cfg.intermediate_size, "silu", cfg.bias, gated=True)
        else:
            self.ffn = FeedForward(H, cfg.intermediate_size, cfg.activation, cfg.bias)
        self.ffn_norm = make_norm(cfg.norm_type, H, cfg.layer_norm_eps, cfg.bias)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
                head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None,
                packing: Packing | None = None, rotary: Rotary | None = None) -> torch.Tensor:
        """head_gate ``[heads]`` / probs (a list the attention probabilities are appended to) /
        packing (``x`` is the real tokens' rows ``[N, H]``) / rotary (RoPE's angles): see
        :meth:`MultiHeadSelfAttention.forward`."""
        if self.pre_norm:
            x = x + self.dropout(self.attn(self.attn_norm(x), mask, is_causal, head_gate, probs, packing, rotary))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, is_causal, head_gate, probs, packing, rotary)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))

    def forward_cached(self, x: torch.Tensor, mask: torch.Tensor | None, past: KV | KVSlot | None,
                       head_gate: torch.Tensor | None = None,
                       probs: list[torch.Tensor] | None = None,
                       rotary: Rotary | None = None) -> tuple[torch.Tensor, KV]:
        """The block over the new positions ``x [B, T, H]`` with causal attention that also reads
        the cached keys/values ``past``; mask ``[B|1, 1|heads, T, t0 + T]`` or ``None``; rotary:
        the new positions' RoPE angles.  Returns ``[B, T, H]`` and the extended keys/values."""
        if self.pre_norm:
            a, kv = self.attn.forward_cached(self.attn_norm(x), past, mask, head_gate, probs, rotary)
            x = x + self.dropout(a)
            return x + self.dropout(self.ffn(self.ffn_norm(x))), kv
        a, kv = self.attn.forward_cached(x, past, mask, head_gate, probs, rotary)
        x = self.attn_norm(x + self.dropout(a))
        return self.ffn_norm(x + self.dropout(self.ffn(x))), kv


def build_layers(cfg: TransformerConfig) -> nn.ModuleList:
    """``num_layers`` layers; with ``sharing`` the shared sub-modules are one object reused."""
    if cfg.sharing == "all":
        layer = TransformerLayer(cfg)
        return nn.ModuleList([layer] * cfg.num_layers)
    layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))
    first = layers[0]
    for layer in layers[1:]:
        if cfg.sharing == "attention":
            layer.attn, layer.attn_norm = first.attn, first.attn_norm
        elif cfg.sharing == "ffn":
            layer.ffn, layer.ffn_norm = first.ffn, first.ffn_norm
    return layers


class Pooler(nn.Module):
    """BERT's pooler: ``tanh(dense(h[:, 0]))``, ``[B, T, H] -> [B, H]``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


__all__ = ["Embeddings", "Pooler", "TransformerLayer", "build_layers"]
