"""The bidirectional language model of ELMo (Peters et al. 2018, section 3.1).

A forward LM and a backward LM over the same tokens ``t_1 .. t_N``, trained jointly to maximise

    sum_k  log p(t_k | t_1 .. t_{k-1}; Θ_x, →Θ_LSTM, Θ_s) + log p(t_k | t_{k+1} .. t_N; Θ_x, ←Θ_LSTM, Θ_s)

with the token representation ``Θ_x`` (the ``lstm`` encoder's character CNN or word table) and
the softmax ``Θ_s`` shared by both directions, and separate forward / backward LSTM stacks.

Examples are the ``clm`` objective's contiguous blocks of the sentence stream (every sentence
followed by the separator, :class:`ptmkit.objectives.stream.SentenceStream`), read whole: a block
of ``T + 1`` stream tokens ``s_0 .. s_T`` is the input (``input_ids [B, T + 1]``); the forward LM
at position ``t`` predicts ``s_{t+1}`` from ``s_0 .. s_t`` (``labels_forward[:, t]``), the backward
LM at ``t`` predicts ``s_{t-1}`` from ``s_t .. s_T`` (``labels_backward[:, t]``).  So each direction
makes ``T`` predictions per block and predicts every stream token once an epoch (all but the
first, resp. the last).  Each block starts from zero LSTM states (the original code carried the
states over between batches).

The softmax is ``[V, P]`` + a bias ``[V]`` (P = one direction's width): the encoder's word table
when it has one of that width and ``tie_embeddings`` (Θ_s tied to Θ_x), else a matrix of its own
(``softmax.weight``); the bias is always the objective's (``softmax.bias``), started from the log
unigram frequencies of the training text (``output_bias="unigram"``).  Dropout ``dropout`` on the
top states before the softmax.  The loss is the mean of the two directions' mean
cross-entropies, computed by :func:`ptmkit.nn.linear_ce.linear_cross_entropy` so the
``[B, T, V]`` logits are never stored; metrics ``forward_loss`` and ``backward_loss`` (their
``exp`` is each direction's perplexity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError, suggest
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.log_probs import next_token_log_probs
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.stream import SentenceStream
from ptmkit.registry import register

OUTPUT_BIAS = ("zero", "unigram")


@dataclass(frozen=True)
class BiLMConfig:
    """separator: the separator token after every sentence; tie_embeddings: use the encoder's word
    table as the softmax when it has one of the right width; output_bias: ``unigram`` (log
    frequencies of the training text) or ``zero``; dropout: on the top states before the softmax."""

    separator: bool = True
    tie_embeddings: bool = True
    output_bias: str = "unigram"
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.output_bias not in OUTPUT_BIAS:
            hint = suggest(str(self.output_bias), OUTPUT_BIAS)
            raise PtmError(f"objective.output_bias={self.output_bias!r} is not one of {OUTPUT_BIAS}{hint}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise PtmError(f"objective.dropout must be in [0, 1), got {self.dropout!r}")


class Softmax(nn.Module):
    """The shared output layer: ``weight [V, P]`` (absent when tied to the word table) and ``bias [V]``."""

    def __init__(self, vocab_size: int, size: int, own_weight: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, size) / math.sqrt(size)) if own_weight else None
        self.bias = nn.Parameter(torch.zeros(vocab_size))


@register("objective", "bilm")
class BidirectionalLM(Objective):
    """ELMo's biLM.  Batch keys: ``input_ids [B, T + 1]``, ``labels_forward`` and ``labels_backward``
    ``[B, T + 1]`` (-100 = not predicted), ``attention_mask [B, T + 1]`` when a block is short."""

    config_class = BiLMConfig
    perplexities = ("forward_loss", "backward_loss")  # each direction's perplexity beside their geometric mean
    encoders = ("lstm",)
    causal = False  # downstream use reads both directions
    hf_heads = ()

    def __init__(self, cfg: BiLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        if not getattr(encoder.config, "bidirectional", False):
            raise PtmError("the bilm objective trains a forward and a backward LM: set model.bidirectional=true")
        self.size = int(encoder.config.token_size)
        table = encoder.output_embeddings()
        V = int(encoder.config.vocab_size)
        self.tied = bool(cfg.tie_embeddings and table is not None and tuple(table.shape) == (V, self.size))
        self.softmax = Softmax(V, self.size, own_weight=not self.tied)
        self.dropout = nn.Dropout(cfg.dropout)
        eos = getattr(tokenizer, "eos_id", None)
        self.eos_id = int(eos if eos is not None else tokenizer.sep_id)
        self.stream = SentenceStream(cfg.separator, self.eos_id, self.pad_id)

    def softmax_weight(self, encoder: Encoder) -> torch.Tensor:
        """``Θ_s``'s matrix ``[V, P]``: the tied word table or the objective's own."""
        return encoder.output_embeddings() if self.tied else self.softmax.weight

    def init_from_corpus(self, corpus: CorpusLike, spans: np.ndarray) -> None:
        """``output_bias="unigram"``: softmax bias = log of the add-one smoothed frequencies of the
        tokens (separators included) in the training blocks ``spans [N, 2]``."""
        if self.cfg.output_bias != "unigram":
            return
        V = self.softmax.bias.shape[0]
        counts = np.ones(V, dtype=np.float64)
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        for i in range(0, len(spans), 4096):  # bounded memory
            seq, inside = self.stream.read(corpus, spans[i : i + 4096])
            counts += np.bincount(seq[inside], minlength=V)[:V]
        with torch.no_grad():
            self.softmax.bias.copy_(torch.from_numpy(np.log(counts / counts.sum())))

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Blocks ``[i T, i T + T + 1)`` of the stream (``T = seq_len``), ``int64 [N, 2]``."""
        if seq_len < 1:
            raise PtmError(f"seq_len must be positive, got {seq_len}")
        return self.stream.block_spans(corpus, seq_len, "biLM")

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        seq, inside = self.stream.read(corpus, spans)  # [B, L], L = T + 1 for full blocks
        forward = np.full_like(seq, IGNORE_INDEX)
        forward[:, :-1] = np.where(inside[:, 1:], seq[:, 1:], IGNORE_INDEX)  # t predicts t + 1
        backward = np.full_like(seq, IGNORE_INDEX)
        backward[:, 1:] = np.where(inside[:, 1:], seq[:, :-1], IGNORE_INDEX)  # t predicts t - 1
        batch = {
            "input_ids": torch.from_numpy(seq),
            "labels_forward": torch.from_numpy(forward),
            "labels_backward": torch.from_numpy(backward),
        }
        if not inside.all():  # only shorter (final) blocks need padding
            batch["attention_mask"] = torch.from_numpy(inside.astype(np.int64))
        return batch

    # -- model ------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        out = backbone(batch["input_ids"], attention_mask=attention_mask)
        weight, bias = self.softmax_weight(backbone), self.softmax.bias
        losses = {}
        for direction in ("forward", "backward"):
            h = self.dropout(out.extras[direction])  # [B, T + 1, P]
            labels = batch[f"labels_{direction}"]
            losses[direction] = linear_cross_entropy(h.flatten(0, 1), weight, bias, labels.flatten())
        loss = 0.5 * (losses["forward"] + losses["backward"])
        n_pred = int((batch["labels_forward"] != IGNORE_INDEX).sum())  # the same count in both directions
        n_tokens = input_tokens(batch)
        metrics = {f"{d}_loss": v.detach() for d, v in losses.items()}
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_pred)

    def lm_log_probs(self, backbone: Encoder, input_ids: torch.Tensor) -> torch.Tensor:
        """The forward LM's ``log p(x_t | x_{<t})`` for ``t = 1 .. T-1`` of ``input_ids [B, T]``
        -> ``[B, T - 1]`` (the forward stack reads only the past; the objective's dropout applies
        in training mode: call ``eval()`` to score)."""
        h = self.dropout(backbone(input_ids).extras["forward"])[:, :-1]
        return next_token_log_probs(h, self.softmax_weight(backbone), self.softmax.bias, input_ids[:, 1:])
