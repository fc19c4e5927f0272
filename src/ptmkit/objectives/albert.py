"""ALBERT's objective (Lan et al. 2020): n-gram masked LM + sentence-order prediction (SOP).

The encoder side of ALBERT is the Transformer's (``model.embedding_size`` E < H: factorized
embeddings ``V x E`` then ``E -> H``; ``model.sharing=all``: one layer's weights used L times).
This file adds what the paper changes in the objective:

* **n-gram masking**: the masked units are runs of ``n`` whole words with
  ``p(n) = (1/n) / sum_{k=1..N} 1/k`` for ``n <= N = max_ngram`` (N = 3: 6/11, 3/11, 2/11); it is
  the ``ngram`` masker of :mod:`ptmkit.objectives.masking`, 15 % of the tokens, 80/10/10.
* **SOP** replaces NSP: an example ``[CLS] A [SEP] B [SEP]`` is cut from whole sentences of one
  document; A and B are two consecutive segments (the cut is MLM's sentence-pair cut,
  :meth:`MaskedLM.split_spans`).  With probability 0.5 they are swapped: ``B, A``.  A binary head
  on the pooled output predicts the order: ``sop_labels [B]`` is 0 for the original order and 1
  for swapped (as HF ``sentence_order_label``).  Unlike NSP's random B, both segments always
  come from the same document, so topic cannot give the answer away; only coherence can.

Loss: ``L = L_MLM + L_SOP`` (cross-entropies).  Batch keys: ``input_ids``, ``attention_mask``,
``token_type_ids`` (0 for ``[CLS]`` A ``[SEP]``, 1 for B ``[SEP]``), ``mlm_positions [B, P]``,
``mlm_labels [B, P]``, ``sop_labels [B]``.  Parameters: ``mlm_head.*`` (``dense: H -> E``, LayerNorm
over E, decoder tied to the ``[V, E]`` word embeddings, ``bias [V]``), ``sop_head.{weight [2, H],
bias [2]}``.  HF export: ``AlbertForPreTraining`` (:mod:`ptmkit.interop.hf_albert`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import CorpusLike, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.registry import register


@dataclass(frozen=True)
class ALBERTConfig(MLMConfig):
    nsp: bool = False
    sop: bool = True
    masking: str = "ngram"
    max_ngram: int = 3
    sop_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.sop_weight, str):
            object.__setattr__(self, "sop_weight", float(self.sop_weight))
        if self.nsp:
            raise PtmError("ALBERT replaces NSP with sentence-order prediction; set objective.nsp=false (objective.sop=true)")
        if self.sop_weight < 0:
            raise PtmError(f"objective.sop_weight must be >= 0, got {self.sop_weight}")


def sop_segments(st: np.ndarray, cut: np.ndarray, en: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Two consecutive segments ``[st, cut)``, ``[cut, en)`` ``[B]``, swapped with p = 0.5.
    Returns ``a0, a1, b0, b1, label`` (label 1 = swapped)."""
    swap = rng.random(len(st)) < 0.5
    a0, a1 = np.where(swap, cut, st), np.where(swap, en, cut)
    b0, b1 = np.where(swap, st, cut), np.where(swap, cut, en)
    return a0, a1, b0, b1, swap.astype(np.int64)


@register("objective", "albert")
class ALBERT(MaskedLM):
    """n-gram MLM + SOP (``sop=false``: n-gram MLM on single texts)."""

    config_class = ALBERTConfig
    hf_heads = ("mlm", "sop")
    hf_family = "albert"

    def __init__(self, cfg: ALBERTConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        model_cfg = encoder.config
        self.sop_head = None
        if cfg.sop:
            if model_cfg.type_vocab_size < 2:
                raise PtmError(
                    f"sentence-order prediction needs segment embeddings (model.type_vocab_size >= 2, got "
                    f"{model_cfg.type_vocab_size}); set objective.sop=false or model.type_vocab_size=2"
                )
            self.sop_head = nn.Linear(model_cfg.hidden_size, 2)
            with torch.no_grad():
                self.sop_head.weight.normal_(0.0, model_cfg.init_std)
                self.sop_head.bias.zero_()

    @property
    def sentence_pairs(self) -> bool:
        return bool(self.cfg.sop)

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        if not self.cfg.sop:
            return super().collate(corpus, spans, rng)
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        a0, a1, b0, b1, labels = sop_segments(*self.split_spans(corpus, spans, rng), rng)
        layout = self.pair_inputs(corpus, a0, a1, b0, b1)
        return self.finish_batch({"sop_labels": torch.from_numpy(labels)}, spans, *layout, rng)

    def exported_heads(self) -> tuple[str, ...]:
        return ("mlm", "sop") if self.sop_head is not None else ("mlm",)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        out = backbone(batch["input_ids"], attention_mask=attention_mask, token_type_ids=batch.get("token_type_ids"))
        loss, metrics, n_predictions = self.mlm_loss(out.last_hidden_state, batch, backbone.output_embeddings())
        if self.sop_head is not None and "sop_labels" in batch:
            sop = self.pair_loss("sop", self.sop_head, out, batch["sop_labels"], metrics)
            loss = loss + self.cfg.sop_weight * sop
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_predictions)
