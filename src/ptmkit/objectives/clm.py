"""Causal (left-to-right) language modelling: GPT (Radford et al. 2018) and GPT-2.

The corpus is read as one stream in which every sentence is followed by a separator token
(the tokenizer's ``eos_id`` if it has one, else ``sep_id``) and cut into contiguous blocks
(:class:`ptmkit.objectives.stream.SentenceStream`): example ``i`` covers stream positions
``[i T, i T + T + 1)``; its first ``T`` tokens are the input and its last ``T`` the targets, so
every stream token is predicted exactly once an epoch.

The LM head is the word-embedding matrix (tied, no parameters of its own); the loss is the mean
next-token cross-entropy (``exp(clm_loss)`` is the perplexity), computed by
:func:`ptmkit.nn.linear_ce.linear_cross_entropy` so the ``[B, T, V]`` logits are never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.host import count
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.log_probs import next_token_log_probs
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.stream import SentenceStream
from ptmkit.registry import register


@dataclass(frozen=True)
class CLMConfig:
    separator: bool = True  # insert the separator token after every sentence


@register("objective", "clm")
class CausalLM(Objective):
    """Next-token prediction.  Batch keys: ``input_ids [B, T]``, ``labels [B, T]``
    (``labels[:, t]`` is the token after ``input_ids[:, t]``; -100 = not predicted)."""

    config_class = CLMConfig
    causal = True
    hf_heads = ("lm",)
    generation = "causal_lm"

    def __init__(self, cfg: CLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        eos = getattr(tokenizer, "eos_id", None)
        self.eos_id = int(eos if eos is not None else tokenizer.sep_id)
        if encoder.output_embeddings() is None or encoder.output_embeddings().shape[1] != encoder.output_size:
            raise PtmError(
                "the clm objective ties its output to the word embeddings, which need the encoder's width "
                "(unset model.embedding_size)"
            )
        self.stream = SentenceStream(cfg.separator, self.eos_id, self.pad_id)

    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        if self.position_limit is not None and seq_len > self.position_limit:
            raise PtmError(f"seq_len={seq_len} is longer than the model's max_position {self.position_limit}")
        return self.stream.block_spans(corpus, seq_len, "CLM")

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        seq, inside = self.stream.read(corpus, spans)
        labels = np.where(inside[:, 1:], seq[:, 1:], IGNORE_INDEX)
        batch = {"input_ids": torch.from_numpy(np.ascontiguousarray(seq[:, :-1])), "labels": torch.from_numpy(labels)}
        if not inside[:, :-1].all():  # only shorter (final) blocks need padding
            batch["attention_mask"] = torch.from_numpy(inside[:, :-1].astype(np.int64))
        return batch

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        out = backbone(batch["input_ids"], attention_mask=attention_mask, token_type_ids=batch.get("token_type_ids"), causal=True)
        labels = batch["labels"]
        # Tied decoder + cross-entropy in tiles: the [B, T, V] logits are never stored.
        loss = linear_cross_entropy(
            out.last_hidden_state.flatten(0, 1), backbone.output_embeddings(), None, labels.flatten()
        )
        n_pred = count((labels != IGNORE_INDEX).sum()) if attention_mask is not None else labels.numel()
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics={"clm_loss": loss.detach()}, n_tokens=n_tokens, n_predictions=n_pred)

    def lm_log_probs(self, backbone: Encoder, input_ids: torch.Tensor) -> torch.Tensor:
        """``log p(x_t | x_{<t})`` for ``t = 1 .. T-1`` of ``input_ids [B, T]`` -> ``[B, T - 1]``
        (causal attention; in the modules' current mode: call ``eval()`` to score)."""
        out = backbone(input_ids, causal=True)
        return next_token_log_probs(out.last_hidden_state[:, :-1], backbone.output_embeddings(), None, input_ids[:, 1:])
