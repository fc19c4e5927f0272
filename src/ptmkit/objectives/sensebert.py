"""SenseBERT (Levine et al. 2020): masked LM plus the prediction of each masked word's
*supersense*, weakly supervised by the supersenses WordNet allows the word.

A word's sense in context is unknown, but the set of supersenses it may take is known
(``bass``: noun.food, noun.animal, noun.artifact, noun.person, noun.attribute, adj.all): the
model predicts a distribution over the S supersenses at every masked position whose word has at
least one, and the loss asks it to put its mass on the allowed set ``A(w)``:

    L_allowed = -log sum_{s in A(w)} p(s | context)
    L_reg     = -(1 / |A(w)|) sum_{s in A(w)} log p(s | context)

(the paper's L_SLM; the second term keeps the model from collapsing onto one allowed sense).
``p(s | context) = softmax(S^T f(h))`` with ``f`` a dense + activation + LayerNorm transform of
the hidden state ``h`` and ``S [S, H]`` the supersense embedding matrix.  The total loss is
``L_MLM + sense_weight * (L_allowed + L_reg)``.

The allowed sets come from a lexicon (:func:`ptmkit.objectives.lexicon.read_supersenses`):
a masked token has them when its vocabulary entry spells a whole lexicon word (SenseBERT, too,
predicts senses for whole-word tokens only).

Supersense-aware input embeddings (``objective.input_senses``, on in the presets as in the paper):
the encoder reads ``(W + S M) x + p`` instead of ``W x + p``, where ``M [S, V]`` is the fixed
0/1 map from each vocabulary entry to its allowed supersenses, so a word's input embedding is
its own plus the sum of its allowed supersenses' embeddings; ``S`` is the same matrix the
supersense head predicts with (input and output tied, as ``W`` is for words).  ``[MASK]`` has
no supersenses, so nothing of a masked word's senses reaches the input.  The MLM head keeps
predicting with ``W`` alone.  Because ``S M`` depends on the vocabulary entry only, the encoder
loaded for use (fine-tuning, features, an export) has it folded into its word embeddings
(``adds_input_embeddings``): it computes exactly what it computed in pre-training.

Metrics: ``sense_loss``, ``sense_acc`` (the arg-max is an allowed supersense) beside MLM's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.activations import get_activation
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.lexicon import read_supersenses, token_words
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SenseBERTConfig(MLMConfig):
    nsp: bool = False
    lexicon: str | None = None  # word<TAB>supersense lines (ptmkit.objectives.lexicon)
    sense_weight: float = 1.0
    # the paper's supersense-aware input embeddings (W + S M) x; the presets turn them on, the
    # default keeps runs whose config predates the option meaning what they were trained as
    input_senses: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.sense_weight, (str, int)) and not isinstance(self.sense_weight, bool):
            object.__setattr__(self, "sense_weight", float(self.sense_weight))
        super().__post_init__()
        if not self.lexicon:
            raise PtmError("SenseBERT needs objective.lexicon=FILE: the supersenses each word may take, one "
                           "word<TAB>supersense per line (ptm data get wordnet-kg writes WordNet's)")
        if self.sense_weight < 0:
            raise PtmError(f"objective.sense_weight must be >= 0, got {self.sense_weight}")


def allowed_table(tokenizer, vocab_size: int, senses: dict[str, set[str]], names: list[str]) -> np.ndarray:
    """bool ``[V, S]``: the supersenses each vocabulary entry's word may take (none for word
    pieces, specials and words outside the lexicon)."""
    index = {n: i for i, n in enumerate(names)}
    table = np.zeros((vocab_size, len(names)), dtype=bool)
    for i, word in enumerate(token_words(tokenizer, vocab_size)):
        for s in senses.get(word, ()) if word else ():
            table[i, index[s]] = True
    return table


def sense_loss(logits: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L_allowed + L_reg, accuracy)`` of ``logits [N, S]`` against ``allowed [N, S]`` (bool,
    each row with at least one True), both means over the N rows, in float32."""
    logp = F.log_softmax(logits.float(), dim=-1)
    inside = logp.masked_fill(~allowed, float("-inf"))
    l_allowed = -torch.logsumexp(inside, dim=-1)
    l_reg = -(logp * allowed).sum(-1) / allowed.sum(-1)
    acc = allowed.gather(1, logits.detach().argmax(-1, keepdim=True)).float().mean()
    return (l_allowed + l_reg).mean(), acc


class SenseHead(nn.Module):
    """``h [N, H] -> logits [N, S]``: dense + activation + LayerNorm, then the supersense
    embeddings ``supersenses [S, H]`` (the paper's S)."""

    def __init__(self, cfg, n_senses: int) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.act = get_activation(cfg.activation)
        self.supersenses = nn.Parameter(torch.empty(n_senses, cfg.hidden_size))
        with torch.no_grad():
            self.dense.weight.normal_(0.0, cfg.init_std)
            self.dense.bias.zero_()
            self.supersenses.normal_(0.0, cfg.init_std)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(h))), self.supersenses)


@register("objective", "sensebert")
class SenseBERT(MaskedLM):
    """MLM + weakly supervised supersense prediction (see the module docstring).  Batch keys:
    MaskedLM's."""

    config_class = SenseBERTConfig
    hf_heads = ("mlm",)
    adds_input_embeddings = True

    def __init__(self, cfg: SenseBERTConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        senses, self.sense_names = read_supersenses(cfg.lexicon)
        table = allowed_table(tokenizer, self.vocab_size, senses, self.sense_names)
        covered = int(table.any(1).sum())
        if covered == 0:
            raise PtmError(f"objective.lexicon={cfg.lexicon}: no entry of the tokenizer's vocabulary is a word of the "
                           f"lexicon ({len(senses)} words); check the lexicon's language and case, or use a "
                           f"word-level tokenizer")
        log.info("SenseBERT: %d of %d vocabulary entries have supersenses (%d supersenses)", covered,
                 self.vocab_size, len(self.sense_names))
        self.register_buffer("allowed", torch.from_numpy(table), persistent=False)  # [V, S]
        mc = encoder.config
        self.sense_head = SenseHead(mc, len(self.sense_names))
        # the qualified name of the encoder's word-embedding table, which the forward pass
        # replaces by W + S M (the encoder is not changed: its own W stays the MLM output layer)
        table_param = encoder.input_embeddings().weight
        self._table_name = next(n for n, p in encoder.named_parameters() if p is table_param)

    def input_embedding_offsets(self) -> torch.Tensor | None:
        """``S M [V, H]``: each vocabulary entry's allowed supersense embeddings, summed (zero for
        entries without supersenses); ``None`` with ``objective.input_senses=false``."""
        if not self.cfg.input_senses:
            return None
        senses = self.sense_head.supersenses  # [S, H]
        return self.allowed.to(senses.dtype) @ senses

    def exported_heads(self) -> tuple[str, ...]:
        # an HF BERT ties its input and output word embeddings: with W + S M folded into the
        # input, its MLM head would predict with W + S M, not the W it was trained with
        return () if self.cfg.input_senses else super().exported_heads()

    def encode(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The encoder's last hidden states ``[B, T, H]``, reading ``(W + S M) x`` when
        ``input_senses`` is on."""
        kwargs = {"attention_mask": batch.get("attention_mask"), "token_type_ids": batch.get("token_type_ids")}
        offsets = self.input_embedding_offsets()
        if offsets is None:
            return backbone(batch["input_ids"], **kwargs).last_hidden_state
        table = backbone.get_parameter(self._table_name)
        table = torch.cat([table[: offsets.shape[0]] + offsets.to(table.dtype), table[offsets.shape[0]:]])
        out = torch.func.functional_call(backbone, {self._table_name: table}, (batch["input_ids"],), kwargs,
                                         strict=False)
        return out.last_hidden_state

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        h = self.encode(backbone, batch)
        loss, metrics, n_predictions = self.mlm_loss(h, batch, backbone.output_embeddings())
        labels, positions = batch["mlm_labels"], batch["mlm_positions"]
        rows, slots = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
        allowed = self.allowed[labels[rows, slots]]  # [N, S]
        keep = allowed.any(-1)
        if bool(keep.any()):
            chosen = h[rows[keep], positions[rows[keep], slots[keep]]]  # [M, H]
            logits = self.sense_head(chosen)  # [M, S]
            sense, metrics["sense_acc"] = sense_loss(logits, allowed[keep])
            metrics["sense_loss"] = sense.detach()
            loss = loss + self.cfg.sense_weight * sense
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=n_predictions)


__all__ = ["SenseBERT", "SenseBERTConfig", "SenseHead", "allowed_table", "sense_loss"]
