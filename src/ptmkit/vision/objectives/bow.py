"""CLIP's second baseline (Radford et al. 2021, Fig. 2): predicting a bag-of-words encoding of
the caption from the image.

Only the image encoder and this objective's head train (no text Transformer: the text encoder
argument is ``None``).  The pooled image vector ``[B, D]`` goes through an optional hidden layer
(``hidden_size > 0``: ``Linear(D -> hidden)``, GELU, LayerNorm) to logits over the tokenizer's
vocabulary.  The target is the caption's bag of words: its distinct token ids other than the
special tokens (``[PAD] [UNK] [CLS] [SEP] [MASK]``, those the tokenizer has), each with weight
``1 / k`` for ``k`` distinct words; the loss is the cross-entropy with that soft target,
``-sum_w target_w log softmax(logits)_w``, averaged over the captions with at least one word.
Metrics: ``bow_loss`` and ``top1`` (the most probable word is one of the caption's).

``score(i, j)``: the mean over caption ``j``'s distinct words of ``log softmax(image i)[word]``,
the loss's own quantity: one image forward pass and a gather.

The bag is read without a ``[B, V]`` multi-hot: each caption's ids are sorted, and a position
counts when it is real, not special and not a repeat of the previous id (:func:`bag_of_words`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.host import count
from ptmkit.registry import register
from ptmkit.train.step import StepOutput, input_tokens
from ptmkit.vision.objectives.base import VLObjective

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class BowConfig:
    hidden_size: int = 0  # 0: a linear head on the pooled image vector; > 0: one hidden layer that wide
    score_batch: int = 256  # images per forward pass in score()


def special_ids(tokenizer: object) -> list[int]:
    """The ids of :data:`SPECIAL_TOKENS` that ``tokenizer`` has (``token_to_id``)."""
    ids = (tokenizer.token_to_id(t) for t in SPECIAL_TOKENS)  # type: ignore[attr-defined]
    return sorted({int(i) for i in ids if i is not None})


def bag_of_words(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 special: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, T], weights [B, T])``: each caption's ids sorted, and weight ``1 / k`` at the
    first occurrence of each of its ``k`` distinct non-special words, 0 elsewhere (padding, special
    tokens, repeats; a caption without words weighs 0 throughout).  ``special [V]`` bool."""
    ordered = input_ids.masked_fill(~attention_mask.bool(), -1).sort(1).values  # padding first
    ids = ordered.clamp(min=0)
    keep = (ordered >= 0) & ~special[ids]
    keep[:, 1:] &= ordered[:, 1:] != ordered[:, :-1]
    k = keep.sum(1, keepdim=True)
    return ids, keep / k.clamp(min=1)


@register("vl_objective", "bow")
class BagOfWords(VLObjective):
    """Bag-of-words prediction from the pooled image vector (see the module docstring)."""

    name = "bow"
    config_class = BowConfig
    text_encoder = False

    def __init__(self, cfg: BowConfig, image_encoder: nn.Module, text_encoder: nn.Module | None,
                 tokenizer: object) -> None:
        super().__init__(cfg, image_encoder, text_encoder, tokenizer)
        if int(cfg.hidden_size) < 0:
            raise PtmError(f"objective.hidden_size must be 0 (a linear head) or a positive width, got {cfg.hidden_size!r}")
        if int(cfg.score_batch) < 1:
            raise PtmError(f"objective.score_batch must be a positive number of images, got {cfg.score_batch!r}")
        vocab = int(tokenizer.vocab_size)  # type: ignore[attr-defined]
        width = int(image_encoder.output_size)
        if cfg.hidden_size:
            self.hidden: nn.Module | None = nn.Sequential(nn.Linear(width, cfg.hidden_size), nn.GELU(),
                                                          nn.LayerNorm(cfg.hidden_size))
            width = int(cfg.hidden_size)
        else:
            self.hidden = None
        self.head = nn.Linear(width, vocab)
        special = torch.zeros(vocab, dtype=torch.bool)
        special[special_ids(tokenizer)] = True
        self.register_buffer("special", special, persistent=False)  # rebuilt from the tokenizer

    def log_probs(self, image_encoder: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, S, S]`` -> ``log softmax`` over the vocabulary ``[B, V]`` (float32 or wider)."""
        x = image_encoder(pixels).pooled
        if self.hidden is not None:
            x = self.hidden(x)
        logits = self.head(x)
        return torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, 1)

    def forward(self, image_encoder: nn.Module, text_encoder: nn.Module | None,
                batch: dict[str, torch.Tensor]) -> StepOutput:
        logp = self.log_probs(image_encoder, batch["pixels"])
        ids, weights = bag_of_words(batch["input_ids"], batch["attention_mask"], self.special)
        per_caption = -(logp.gather(1, ids) * weights).sum(1)  # 0 for a caption without words
        has_words = weights.sum(1) > 0
        captions = has_words.sum()
        loss = per_caption.sum() / captions.clamp(min=1)
        best = logp.detach().argmax(1, keepdim=True)
        hit = ((ids == best) & (weights > 0)).any(1) & has_words
        top1 = hit.sum() / captions.clamp(min=1)
        return StepOutput(loss=loss, metrics={"bow_loss": loss.detach(), "top1": top1},
                          n_tokens=input_tokens(batch), n_predictions=count(captions))

    @torch.no_grad()
    def score(self, image_encoder: nn.Module, text_encoder: nn.Module | None, pixels: torch.Tensor,
              input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[N, M]``: the mean log-probability of caption ``j``'s distinct words under image ``i``'s
        bag-of-words distribution (0 for a caption without words); ``score_batch`` images at a time."""
        ids, weights = bag_of_words(input_ids, attention_mask, self.special)
        step = int(self.cfg.score_batch)
        rows = []
        for i in range(0, pixels.shape[0], step):
            logp = self.log_probs(image_encoder, pixels[i : i + step])  # [n, V]
            rows.append((logp[:, ids] * weights.to(logp.dtype)).sum(-1))  # [n, M, T] -> [n, M]
        if not rows:
            return torch.zeros(0, input_ids.shape[0], device=input_ids.device)
        return torch.cat(rows)


__all__ = ["BagOfWords", "BowConfig", "SPECIAL_TOKENS", "bag_of_words", "special_ids"]
