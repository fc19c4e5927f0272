"""Input embeddings: token + learned absolute position (+ segment), optional LayerNorm, dropout."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.models.config import TransformerConfig


class Embeddings(nn.Module):
    """``input_ids [B, T] -> [B, T, H]``.

    Parameters: ``word_embeddings.weight [V, H]`` (tied by the output heads),
    ``position_embeddings.weight [P, H]``, ``token_type_embeddings.weight [S, H]`` when
    ``type_vocab_size > 0``, ``norm.{weight, bias}`` when ``embedding_norm`` (BERT).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type_embeddings = (
            nn.Embedding(cfg.type_vocab_size, cfg.hidden_size) if cfg.type_vocab_size > 0 else None
        )
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.embedding_norm else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        if position_ids is None:
            x = x + self.position_embeddings.weight[:T]  # [T, H] broadcast over the batch, no gather
        else:
            x = x + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # every token in segment 0
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)
