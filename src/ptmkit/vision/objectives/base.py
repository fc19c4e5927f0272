"""The vision–language objective contract.

An objective is registered by name (``@register("vl_objective", "clip")``) with a frozen config
class, and constructed as ``cls(cfg, image_encoder, text_encoder, tokenizer)`` by
:func:`ptmkit.vision.build.build_vl_model`.  It owns its heads (projections, temperature, LM or
matching heads, co-attention layers); the towers belong to the
:class:`~ptmkit.vision.model.VisionLanguageModel` and are passed to every call, so an exported
tower never carries an objective's parameters.

Class attributes:

* ``image_encoders``: the image encoder names it can train (another pairing is refused naming both);
* ``text_encoder``: ``True`` when it needs a text Transformer (CLIP, VisualBERT, ViLBERT, the
  caption LM); ``False`` when the image encoder alone is trained (bag-of-words prediction);
* ``causal_text``: the text is read left to right (the caption LM);
* ``perplexity``: the metric the Trainer's ``ppl`` exponentiates (a mean token negative
  log-likelihood: the caption LM's ``lm_loss``), ``None`` for a loss that is not one (contrastive,
  matching, bag-of-words).

Batches (:class:`~ptmkit.vision.batches.ImageTextBatches`): ``pixels [B, 3, S, S]`` float,
``input_ids [B, T]`` / ``attention_mask [B, T]`` (``[CLS] caption [SEP]`` right-padded),
``concept [B]`` (distinct within a batch, so every other row is a true negative).

* ``forward(image_encoder, text_encoder, batch) -> StepOutput``.
* ``score(image_encoder, text_encoder, pixels [N, 3, S, S], input_ids [M, T], attention_mask [M, T])
  -> [N, M]``: how well each image matches each text, higher is better (cosine similarity for a dual
  encoder, a matching logit for a cross-encoder, a mean log-likelihood for the generative
  baselines).  Retrieval and zero-shot classification read only this.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from ptmkit.train.step import StepOutput


class VLObjective(nn.Module):
    """Base class of registered vision–language objectives (see the module docstring)."""

    name: ClassVar[str]
    config_class: ClassVar[type]
    image_encoders: ClassVar[tuple[str, ...]] = ("cnn", "vit")
    text_encoder: ClassVar[bool] = True
    causal_text: ClassVar[bool] = False
    perplexity: ClassVar[str | None] = None

    def __init__(self, cfg: Any, image_encoder: nn.Module, text_encoder: nn.Module | None, tokenizer: Any) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, image_encoder: nn.Module, text_encoder: nn.Module | None,
                batch: dict[str, torch.Tensor]) -> StepOutput:
        raise NotImplementedError

    def score(self, image_encoder: nn.Module, text_encoder: nn.Module | None, pixels: torch.Tensor,
              input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
