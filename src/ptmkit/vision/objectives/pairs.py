"""What the cross-encoding vision–language objectives share (VisualBERT, ViLBERT, and a caption LM's
pair scorer): in-batch negatives for image–text matching, masking of caption tokens and image
regions, the tied masked-LM loss, and scoring every (image, text) pair in chunks.

Randomness: every draw here (which rows become negatives and their partners, which tokens and
regions are masked, the 80/10/10 choice, the random replacement tokens) comes from PyTorch's
default CPU generator, whose state the trainer saves and restores, and is moved to the batch's
device afterwards; so a resumed run draws what the uninterrupted one would, on any device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.host import host_reads_cheap
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.mlm import MLMHead


def check_probability(name: str, value: Any, high_open: bool = True) -> float:
    """``value`` as a float in ``[0, 1)`` (``[0, 1]`` with ``high_open=False``), else a :class:`PtmError`."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise PtmError(f"objective.{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not (0.0 <= p < 1.0 if high_open else 0.0 <= p <= 1.0):
        raise PtmError(f"objective.{name} must be in [0, {'1)' if high_open else '1]'}, got {value!r}")
    return p


def transformer_config(text_encoder: nn.Module | None, objective: str) -> Any:
    """The text encoder's Transformer config, or a :class:`PtmError` when it has none."""
    cfg = getattr(text_encoder, "config", None)
    if text_encoder is None or getattr(text_encoder, "layers", None) is None or not hasattr(cfg, "hidden_size"):
        raise PtmError(f"the {objective} objective needs a Transformer text encoder, got "
                       f"{type(text_encoder).__name__}")
    return cfg


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation of an objective's own layers: Linear and Embedding weights ~ N(0, std),
    biases 0, LayerNorm gain 1 and bias 0."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, std)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()


def _uniform(*shape: int, device: torch.device) -> torch.Tensor:
    """``U[0, 1)`` draws of ``shape`` from PyTorch's default CPU generator, on ``device``."""
    return torch.rand(*shape).to(device)


# ---------------------------------------------------------------------------- negatives
def sample_negatives(batch_size: int, prob: float, device: torch.device,
                     concept: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Image–text matching pairs from a batch of true pairs: each row independently becomes a
    negative with probability ``prob``, its caption replaced by that of a uniformly chosen other
    row of a different concept (``concept [B]``; ``None``: every row its own concept).  A row with
    no such partner (a batch of one) stays positive.

    Returns ``partner [B]`` (int64: the row whose caption row ``b`` now reads; ``b`` itself when
    positive) and ``matched [B]`` (bool: the caption describes the image)."""
    B = batch_size
    keys = _uniform(B, B, device=device)  # [B, B]: a random order of the candidate partners
    rows = torch.arange(B, device=device)
    same = rows[:, None] == rows[None, :]
    if concept is not None:
        same = same | (concept[:, None] == concept[None, :])
    keys = keys.masked_fill(same, -1.0)
    best, choice = keys.max(dim=1)
    negative = (_uniform(B, device=device) < prob) & (best >= 0)
    partner = torch.where(negative, choice, rows)
    return partner, ~negative


def matching_loss(logit: torch.Tensor, matched: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary cross-entropy of matching logits ``[B]`` against ``matched [B]`` (bool) and the
    (detached) accuracy of ``logit > 0``."""
    loss = F.binary_cross_entropy_with_logits(logit.float(), matched.float())
    acc = ((logit.detach() > 0) == matched).float().mean()
    return loss, acc


# ---------------------------------------------------------------------------- masking
def choose(candidate: torch.Tensor, prob: float) -> torch.Tensor:
    """``candidate [B, L]`` (bool) -> chosen ``[B, L]`` (bool): in each row ``max(1, round(prob * n))``
    of its ``n`` candidates, uniformly at random (none in a row without candidates), the budget of
    the text objectives' token masker (:func:`ptmkit.objectives.masking.select_tokens`)."""
    keys = _uniform(*candidate.shape, device=candidate.device).masked_fill(~candidate, 2.0)
    rank = keys.argsort(dim=1).argsort(dim=1)  # each position's place in its row's random order
    n = candidate.sum(dim=1, keepdim=True)
    budget = torch.where(n > 0, torch.clamp(torch.round(n * prob), min=1), torch.zeros_like(n))
    return candidate & (rank < budget)


class TokenMasker(nn.Module):
    """BERT's corruption of captions inside the forward pass: ``(input_ids [B, T], attention_mask
    [B, T]) -> (corrupted ids [B, T], labels [B, T])``.  Of the real non-special tokens of each row
    :func:`choose` picks ``prob``; 80 % become [MASK], 10 % a random ordinary token, 10 % stay;
    labels hold their original ids there and ``IGNORE_INDEX`` elsewhere."""

    def __init__(self, tokenizer: Any, vocab_size: int, prob: float) -> None:
        super().__init__()
        self.prob = prob
        self.mask_id = int(tokenizer.mask_id)
        specials = {int(tokenizer.pad_id), int(tokenizer.cls_id), int(tokenizer.sep_id), self.mask_id,
                    int(tokenizer.unk_id)} | {int(i) for i in getattr(tokenizer, "special_ids", ()) or ()}
        special = torch.zeros(vocab_size, dtype=torch.bool)
        special[[i for i in specials if 0 <= i < vocab_size]] = True
        if bool(special.all()):
            raise PtmError("the tokenizer has no ordinary tokens to mask or to use as random replacements")
        self.register_buffer("special", special, persistent=False)
        self.register_buffer("pool", (~special).nonzero().flatten(), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chosen = choose(attention_mask.bool() & ~self.special[input_ids], self.prob)
        labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
        u = _uniform(*input_ids.shape, device=input_ids.device)
        picks = torch.randint(len(self.pool), input_ids.shape).to(input_ids.device)
        ids = torch.where(chosen & (u < 0.8), torch.full_like(input_ids, self.mask_id), input_ids)
        ids = torch.where(chosen & (u >= 0.8) & (u < 0.9), self.pool[picks], ids)
        return ids, labels


# ---------------------------------------------------------------------------- masked LM
class TiedMLM(nn.Module):
    """The masked-LM loss through BERT's head (:class:`~ptmkit.objectives.mlm.MLMHead`: dense +
    activation + LayerNorm, decoder tied to the text encoder's input embeddings, own bias).
    ``(h [B, T, H], labels [B, T], embedding weight [V, E]) -> (loss, accuracy, predicted count)``:
    the mean cross-entropy over the labelled positions, 0 (with a gradient of zeros) when none is."""

    def __init__(self, text_encoder: nn.Module) -> None:
        super().__init__()
        self.head = MLMHead(text_encoder.config, out_size=text_encoder.input_embeddings().weight.shape[1])

    def forward(self, h: torch.Tensor, labels: torch.Tensor,
                decoder_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if host_reads_cheap(h):  # the head runs on the labelled rows only
            keep = labels != IGNORE_INDEX
            h, labels = h[keep], labels[keep]
        else:  # fixed shapes, no read-back: every position, the unlabelled ones ignored
            h, labels = h.flatten(0, -2), labels.flatten()
        logits = self.head(h, decoder_weight).float()  # [P, V]
        valid = labels != IGNORE_INDEX
        n = valid.sum()
        nll = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        loss = nll / n.clamp(min=1)
        acc = ((logits.detach().argmax(-1) == labels) & valid).sum() / n.clamp(min=1)
        return loss, acc.float(), n


# ---------------------------------------------------------------------------- scoring
def encode_images(image_encoder: nn.Module, pixels: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The image encoder over ``pixels [N, 3, S, S]`` ``chunk`` images at a time: ``(tokens [N, R, D],
    pooled [N, D])``."""
    step = max(1, chunk)
    outs = [image_encoder(pixels[i:i + step]) for i in range(0, pixels.shape[0], step)] or [image_encoder(pixels)]
    return torch.cat([o.tokens for o in outs]), torch.cat([o.pooled for o in outs])


__all__ = ["TiedMLM", "TokenMasker", "check_probability", "choose", "encode_images", "init_weights",
           "matching_loss", "sample_negatives", "transformer_config"]
