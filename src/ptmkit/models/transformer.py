"""The Transformer encoder stack (``Backbone``): embeddings -> L layers (-> final LayerNorm)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.models.config import TransformerConfig
from ptmkit.models.embeddings import Embeddings
from ptmkit.nn.attention import MultiHeadSelfAttention
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.masks import build_attention_mask


@dataclass
class BackboneOutput:
    """last_hidden_state ``[B, T, H]``; hidden_states: ``num_layers + 1`` tensors ``[B, T, H]``
    (the embedding output, then each layer's; with pre-LN the last one is after ``final_norm``,
    as in HF transformers) or ``None``; pooled ``[B, H]`` (``tanh(W h_0 + b)``) or ``None``."""

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    pooled: torch.Tensor | None = None


class TransformerLayer(nn.Module):
    """One block: self-attention and feed-forward sub-layers, each with a residual connection.

    post-LN (BERT):  ``h = LN(x + drop(attn(x)))``; ``y = LN(h + drop(ffn(h)))``.
    pre-LN (GPT-2):  ``h = x + drop(attn(LN(x)))``; ``y = h + drop(ffn(LN(h)))``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.attn = MultiHeadSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.dropout(self.attn(self.attn_norm(x), mask, is_causal))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, is_causal)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Pooler(nn.Module):
    """BERT's pooler: ``tanh(dense(h[:, 0]))``, ``[B, T, H] -> [B, H]``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class Backbone(nn.Module):
    """Embeddings followed by ``num_layers`` Transformer layers.

    The attention structure is data: ``config.causal`` makes the default mask causal and an
    explicit ``attn_mask`` (prefix LM, seq2seq, ...) overrides it.  Parameter names are fixed by
    ``docs/architecture.md`` (the HF key maps rely on them).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm == "pre" else None
        self.pooler = Pooler(config.hidden_size) if config.pooler else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BERT / GPT-2 initialisation: weights ~ N(0, init_std), biases 0, LayerNorm gain 1.

        With ``scaled_residual_init`` (GPT-2) the projections that write into the residual
        stream (``attn.out``, ``ffn.fc2``) use ``init_std / sqrt(2 * num_layers)``, so the
        variance of the residual sum does not grow with depth.
        """
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        if self.config.scaled_residual_init:
            scaled = std / math.sqrt(2 * self.config.num_layers)
            for layer in self.layers:
                layer.attn.out.weight.normal_(0.0, scaled)
                layer.ffn.fc2.weight.normal_(0.0, scaled)

    def _check_inputs(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None) -> None:
        if input_ids.dim() != 2:
            raise PtmError(f"input_ids must be [batch, length], got shape {tuple(input_ids.shape)}")
        T = input_ids.shape[1]
        P = self.config.max_position
        if position_ids is None and T > P:
            raise PtmError(
                f"sequence length {T} is longer than the model's max_position {P}; "
                f"use seq_len <= {P} or a model with more positions"
            )
        if position_ids is not None and position_ids.numel() and int(position_ids.max()) >= P:
            raise PtmError(f"position id {int(position_ids.max())} >= the model's max_position {P}")
        if input_ids.numel():
            lo, hi = torch.aminmax(input_ids)  # one pass over the batch
            lo, hi = int(lo), int(hi)
            V = self.config.vocab_size
            if hi >= V or lo < 0:
                bad = hi if hi >= V else lo
                raise PtmError(
                    f"token id {bad} is outside the model's vocabulary of size {V}: "
                    f"the tokenizer does not match the model (vocab mismatch)"
                )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> BackboneOutput:
        """input_ids ``[B, T]``; attention_mask ``[B, T]`` (1 = token, 0 = padding);
        token_type_ids ``[B, T]``; position_ids ``[B or 1, T]``; attn_mask ``[B|1, heads|1, T, T]``
        (boolean, True = may attend; or additive float)."""
        self._check_inputs(input_ids, position_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask, is_causal = build_attention_mask(attention_mask, attn_mask, self.config.causal, input_ids.shape[1], x.dtype)
        hidden: list[torch.Tensor] | None = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x, mask, is_causal)
            if hidden is not None:
                hidden.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden is not None:
                hidden[-1] = x
        pooled = self.pooler(x) if self.pooler is not None else None
        return BackboneOutput(x, tuple(hidden) if hidden is not None else None, pooled)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
