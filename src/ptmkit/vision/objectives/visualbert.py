"""VisualBERT (Li et al. 2019, "VisualBERT: A Simple and Performant Baseline for Vision and
Language"): one Transformer reads the caption and the image regions as one sequence.

The text encoder's own layers (:func:`~ptmkit.vision.streams.run_layers`) run over

    ``[ embed([CLS] caption [SEP])  ;  visual embeddings of the N image tokens ]``   ``[B, T + N, H]``

where the text part is the text encoder's embedding layer (words, positions ``0 .. T - 1``,
segment 0) and a visual embedding is ``LayerNorm(W · token + e_visual + p_n)`` (``W [H, D]``; a
learned visual segment vector ``e_visual [H]``; learned positions ``p_n``, ``n = 0 .. N - 1``, in
the image tokens' raster order), then dropout.  Every real position attends to every other;
padding keys are hidden.

Pre-training (both tasks in one pass over the same inputs, as in the paper):

* masked language modelling with the image visible: 15 % of each caption's ordinary tokens
  (``mlm_prob``; at least one) are chosen, 80 % of them become [MASK], 10 % a random ordinary
  token, 10 % stay; BERT's head (dense + activation + LayerNorm, decoder tied to the text input
  embeddings, own bias) predicts them.
* sentence–image prediction (image–text matching): with probability ``negative_prob`` a row's
  caption is replaced by another row's (a different concept: :func:`.pairs.sample_negatives`);
  a linear head on the [CLS] state (through the text encoder's pooler when it has one, as BERT's
  NSP) gives one logit, trained with binary cross-entropy (label 1 = the caption describes the
  image).

``loss = mlm_loss + itm_weight · itm_loss``.

Differences from the paper: VisualBERT's image tokens are a detector's region features and its
second pre-training task pairs an image with two captions (the second a true caption or a random
one half of the time); here the regions are the image encoder's tokens (a ViT's patches or a
CNN's feature-map cells) and each image has one caption, replaced by another concept's caption
with probability ``negative_prob``.  Masked words are predicted on the matched rows only (on a
mismatched row the image would mislead, and learning to ignore it is not the point); the captions
of every row are corrupted alike, so the presence of [MASK] says nothing about matching.

``score`` is the matching logit of every (image, text) pair ``[N, M]``, without masking,
``score_batch`` pairs at a time.  Randomness: PyTorch's default CPU generator (see :mod:`.pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.registry import register
from ptmkit.train.step import StepOutput, input_tokens
from ptmkit.vision.objectives.base import VLObjective
from ptmkit.vision.objectives.pair_scores import score_pairs
from ptmkit.vision.objectives.pairs import (
    TiedMLM,
    TokenMasker,
    check_probability,
    encode_images,
    init_weights,
    matching_loss,
    sample_negatives,
    transformer_config,
)
from ptmkit.vision.streams import key_padding, run_layers


@dataclass(frozen=True)
class VisualBERTConfig:
    mlm_prob: float = 0.15  # share of each caption's ordinary tokens predicted (at least one)
    itm_weight: float = 1.0  # weight of the image–text matching loss
    negative_prob: float = 0.5  # probability that a row's caption is swapped for another concept's
    score_batch: int = 256  # (image, text) pairs per forward pass in score()

    def __post_init__(self) -> None:
        mlm = check_probability("mlm_prob", self.mlm_prob)
        if mlm <= 0:
            raise PtmError(f"objective.mlm_prob must be in (0, 1), got {self.mlm_prob!r}")
        object.__setattr__(self, "mlm_prob", mlm)
        object.__setattr__(self, "negative_prob", check_probability("negative_prob", self.negative_prob))
        try:
            weight = float(self.itm_weight)
        except (TypeError, ValueError):
            weight = -1.0
        if weight < 0:
            raise PtmError(f"objective.itm_weight must be a number >= 0, got {self.itm_weight!r}")
        object.__setattr__(self, "itm_weight", weight)
        if not isinstance(self.score_batch, int) or isinstance(self.score_batch, bool) or self.score_batch < 1:
            raise PtmError(f"objective.score_batch must be a positive integer, got {self.score_batch!r}")


class VisualEmbeddings(nn.Module):
    """Image tokens ``[B, N, D]`` -> ``[B, N, H]``: ``LayerNorm(W x + e_visual + p_n)``, then dropout.
    Parameters: ``project.{weight [H, D], bias}``, ``segment [H]``, ``positions.weight [N, H]``,
    ``norm.*``."""

    def __init__(self, in_size: int, num_tokens: int, text_cfg) -> None:
        super().__init__()
        H = text_cfg.hidden_size
        self.project = nn.Linear(in_size, H)
        self.segment = nn.Parameter(torch.zeros(H))
        self.positions = nn.Embedding(num_tokens, H)
        self.norm = nn.LayerNorm(H, eps=text_cfg.layer_norm_eps)
        self.dropout = Dropout(text_cfg.dropout)
        init_weights(self, text_cfg.init_std)
        with torch.no_grad():
            self.segment.normal_(0.0, text_cfg.init_std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        N = tokens.shape[1]
        if N > self.positions.num_embeddings:
            raise PtmError(f"the image encoder gave {N} tokens, the visual embeddings have positions for "
                           f"{self.positions.num_embeddings}")
        x = self.project(tokens) + self.segment + self.positions.weight[:N]
        return self.dropout(self.norm(x))


@register("vl_objective", "visualbert")
class VisualBERT(VLObjective):
    """One stream over caption and image tokens; masked LM + image–text matching (module docstring).

    Parameters of its own: ``visual.*`` (:class:`VisualEmbeddings`), ``mlm.head.*`` (BERT's MLM
    head; its decoder is the text encoder's input embeddings), ``itm.{weight [1, H], bias [1]}``.
    Batch: ``pixels [B, 3, S, S]``, ``input_ids [B, T]``, ``attention_mask [B, T]`` and optionally
    ``concept [B]``.  Metrics: ``mlm_loss``, ``mlm_acc``, ``itm_loss``, ``itm_acc``."""

    name = "visualbert"
    config_class = VisualBERTConfig
    image_encoders = ("cnn", "vit")
    text_encoder = True

    def __init__(self, cfg: VisualBERTConfig, image_encoder: nn.Module, text_encoder: nn.Module | None,
                 tokenizer) -> None:
        super().__init__(cfg, image_encoder, text_encoder, tokenizer)
        text_cfg = transformer_config(text_encoder, self.name)
        self.visual = VisualEmbeddings(image_encoder.output_size, image_encoder.num_tokens, text_cfg)
        self.masker = TokenMasker(tokenizer, text_cfg.vocab_size, cfg.mlm_prob)
        self.mlm = TiedMLM(text_encoder)
        self.itm = nn.Linear(text_cfg.hidden_size, 1)
        init_weights(self.itm, text_cfg.init_std)

    def encode(self, text_encoder: nn.Module, tokens: torch.Tensor, input_ids: torch.Tensor,
               attention_mask: torch.Tensor) -> torch.Tensor:
        """Image tokens ``[B, N, D]`` and captions ``[B, T]`` -> the stream's last states
        ``[B, T + N, H]`` (caption positions first)."""
        text = text_encoder.embed(input_ids)
        x = torch.cat([text, self.visual(tokens).to(text.dtype)], dim=1)
        keep = torch.cat([attention_mask.bool(), attention_mask.new_ones(tokens.shape[:2], dtype=torch.bool)], dim=1)
        h, _ = run_layers(text_encoder, x, key_padding(keep))
        return h

    def match(self, text_encoder: nn.Module, h: torch.Tensor) -> torch.Tensor:
        """States ``[B, L, H]`` -> matching logits ``[B]`` from the [CLS] position (pooled by the
        text encoder's pooler when it has one)."""
        pooler = getattr(text_encoder, "pooler", None)
        pooled = pooler(h) if pooler is not None else h[:, 0]
        return self.itm(pooled).squeeze(-1)

    def forward(self, image_encoder: nn.Module, text_encoder: nn.Module | None,
                batch: dict[str, torch.Tensor]) -> StepOutput:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        B, T = ids.shape
        image = image_encoder(batch["pixels"])
        partner, matched = sample_negatives(B, self.cfg.negative_prob, ids.device, batch.get("concept"))
        ids, mask = ids[partner], mask[partner]
        corrupted, labels = self.masker(ids, mask)
        labels = labels.masked_fill(~matched[:, None], IGNORE_INDEX)  # words are predicted on matched rows
        h = self.encode(text_encoder, image.tokens, corrupted, mask)
        mlm_loss, mlm_acc, _ = self.mlm(h[:, :T], labels, text_encoder.input_embeddings().weight)
        itm_loss, itm_acc = matching_loss(self.match(text_encoder, h), matched)
        loss = mlm_loss + self.cfg.itm_weight * itm_loss
        metrics = {"mlm_loss": mlm_loss.detach(), "mlm_acc": mlm_acc, "itm_loss": itm_loss.detach(), "itm_acc": itm_acc}
        n_tokens = input_tokens({"attention_mask": mask})  # the caption tokens read
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=B)

    def score(self, image_encoder: nn.Module, text_encoder: nn.Module | None, pixels: torch.Tensor,
              input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The matching logit of every (image, text) pair, ``[N, M]``: the images are encoded once
        (``score_batch`` at a time), then each chunk of ``score_batch`` pairs runs through the stream."""
        chunk = self.cfg.score_batch
        tokens, _ = encode_images(image_encoder, pixels, chunk)

        def pair_logits(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            return self.match(text_encoder, self.encode(text_encoder, tokens[i], input_ids[j], attention_mask[j]))

        return score_pairs(pair_logits, pixels.shape[0], input_ids.shape[0], chunk)


__all__ = ["VisualBERT", "VisualBERTConfig", "VisualEmbeddings"]
