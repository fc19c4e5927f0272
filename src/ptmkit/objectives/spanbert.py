"""SpanBERT (Joshi et al. 2020): span masking and the span boundary objective, no NSP.

Masking is the ``span`` masker of :mod:`ptmkit.objectives.masking`: spans of whole words whose
length in words follows Geometric(p = 0.2) clipped at 10 (mean 3.8 words), chosen until 15% of
the maskable tokens are covered; [MASK] / random / kept (80/10/10) is decided once per span.
Examples are full sentences packed to the sequence length, without next sentence prediction.

Each masked token x_i of a span (s, e) (first and last position) is predicted twice:

* **MLM**, from its own final hidden state h_i (BERT's head, :class:`~ptmkit.objectives.mlm.MLMHead`);
* **SBO**, from the span's boundary states and its position inside the span only:
  ``y_i = f([h_{s-1}; h_{e+1}; p_{i-s+1}])``, where p are learned relative position embeddings
  and f is two blocks of Linear + GELU (the encoder's activation) + LayerNorm; then the decoder
  tied to the word embeddings (``encoder.output_embeddings()``) with a bias of its own.

``loss = L_MLM + sbo_weight * L_SBO`` (the paper: weight 1), each the mean cross-entropy over the
masked tokens.  Both heads run only on the masked positions: the hidden states are gathered
first, as in :class:`~ptmkit.objectives.mlm.MaskedLM`.

Batch keys: MaskedLM's (``input_ids``, ``attention_mask``, ``token_type_ids``, ``mlm_positions``,
``mlm_labels``) plus ``sbo_left [B, P]`` and ``sbo_right [B, P]``, the positions s - 1 and
e + 1 of each slot's span (0 in unused slots).  A span never includes [CLS], [SEP] or padding,
so both boundaries are real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.activations import get_activation
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.masking import Masked
from ptmkit.objectives.mlm import MaskedLM, MLMConfig, cross_entropy_and_accuracy
from ptmkit.registry import register


@dataclass(frozen=True)
class SpanBERTConfig(MLMConfig):
    nsp: bool = False
    masking: str = "span"
    corruption: str = "span"  # 80/10/10 decided per span
    span_p: float = 0.2
    max_span: int = 10  # words
    sbo_weight: float = 1.0
    # Relative positions i - s inside a span, in tokens; longer spans share the last embedding.
    sbo_positions: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.sbo_weight, (str, int)) and not isinstance(self.sbo_weight, bool):
            object.__setattr__(self, "sbo_weight", float(self.sbo_weight))
        super().__post_init__()
        if self.nsp:
            raise PtmError("objective.nsp is not part of SpanBERT (it trains on single segments); set objective.nsp=false")
        if self.masking == "token":
            raise PtmError("the span boundary objective needs spans: set objective.masking to span, whole_word or ngram")
        if self.sbo_weight < 0:
            raise PtmError(f"objective.sbo_weight must be >= 0, got {self.sbo_weight}")
        if self.sbo_positions < 1:
            raise PtmError(f"objective.sbo_positions must be >= 1, got {self.sbo_positions}")


class SpanBoundaryHead(nn.Module):
    """``(h_left [N, H], h_right [N, H], rel [N]) -> logits [N, V]``.

    ``f([h_left; h_right; p_rel])``: Linear 3H -> H + activation + LayerNorm, Linear H -> E +
    activation + LayerNorm (E: the word-embedding width), then the tied decoder plus ``bias``.
    Parameters: ``position.weight [n_positions, H]``, ``dense1.*``, ``norm1.*``, ``dense2.*``,
    ``norm2.*``, ``bias [V]``.
    """

    def __init__(self, cfg, out_size: int, n_positions: int) -> None:
        super().__init__()
        hidden = cfg.hidden_size
        self.position = nn.Embedding(n_positions, hidden)
        self.dense1 = nn.Linear(3 * hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.dense2 = nn.Linear(hidden, out_size)
        self.norm2 = nn.LayerNorm(out_size, eps=cfg.layer_norm_eps)
        self.act = get_activation(cfg.activation)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        with torch.no_grad():
            for m in (self.position, self.dense1, self.dense2):
                m.weight.normal_(0.0, cfg.init_std)
            self.dense1.bias.zero_()
            self.dense2.bias.zero_()

    def forward(self, left: torch.Tensor, right: torch.Tensor, rel: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        p = self.position(rel.clamp(0, self.position.num_embeddings - 1))
        x = torch.cat([left, right, p], dim=-1)
        x = self.norm1(self.act(self.dense1(x)))
        x = self.norm2(self.act(self.dense2(x)))
        return F.linear(x, decoder_weight, self.bias)


@register("objective", "spanbert")
class SpanBERT(MaskedLM):
    """Span masking + MLM + SBO.  Inherits MaskedLM's examples, batches and MLM head; adds the
    span boundaries to the batch and the SBO head.  HF export writes the encoder and MLM head."""

    config_class = SpanBERTConfig
    hf_heads = ("mlm",)

    def __init__(self, cfg: SpanBERTConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        width = encoder.output_embeddings().shape[1]
        self.sbo_head = SpanBoundaryHead(encoder.config, width, cfg.sbo_positions)

    def init_from_corpus(self, corpus, spans) -> None:
        """``output_bias="unigram"`` starts both decoder biases at the log unigram distribution."""
        super().init_from_corpus(corpus, spans)
        if self.cfg.output_bias == "unigram":
            with torch.no_grad():
                self.sbo_head.bias.copy_(self.mlm_head.bias)

    def add_predictions(self, batch: dict[str, torch.Tensor], masked: Masked) -> None:
        super().add_predictions(batch, masked)
        used = masked.used
        batch["sbo_left"] = torch.from_numpy((masked.span_start - 1) * used)
        batch["sbo_right"] = torch.from_numpy((masked.span_end + 1) * used)

    def heads(
        self, h: torch.Tensor, batch: dict[str, torch.Tensor], decoder_weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(target [N], MLM logits [N, V], SBO logits [N, V])`` for the N masked tokens of the
        final hidden states ``h [B, T, H]``; only those rows (and their boundaries) are gathered."""
        labels = batch["mlm_labels"]
        rows, slots = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
        target = labels[rows, slots]
        pos = batch["mlm_positions"][rows, slots]
        left = batch["sbo_left"][rows, slots]
        right = batch["sbo_right"][rows, slots]
        mlm_logits = self.mlm_head(h[rows, pos], decoder_weight)
        sbo_logits = self.sbo_head(h[rows, left], h[rows, right], pos - left - 1, decoder_weight)
        return target, mlm_logits, sbo_logits

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        out = backbone(batch["input_ids"], attention_mask=attention_mask, token_type_ids=batch.get("token_type_ids"))
        target, mlm_logits, sbo_logits = self.heads(out.last_hidden_state, batch, backbone.output_embeddings())
        mlm_loss, mlm_acc = cross_entropy_and_accuracy(mlm_logits, target)
        sbo_loss, sbo_acc = cross_entropy_and_accuracy(sbo_logits, target)
        metrics = {"mlm_loss": mlm_loss.detach(), "mlm_acc": mlm_acc, "sbo_loss": sbo_loss.detach(), "sbo_acc": sbo_acc}
        n_tokens = input_tokens(batch)
        return StepOutput(loss=mlm_loss + self.cfg.sbo_weight * sbo_loss, metrics=metrics,
                          n_tokens=n_tokens, n_predictions=int(target.numel()))
