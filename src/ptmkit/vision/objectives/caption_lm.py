"""CLIP's first baseline (Radford et al. 2021, Fig. 2): a Transformer language model that predicts
an image's caption.

A prefix LM on the text Transformer.  The image encoder's region tokens ``[B, N, D]`` are
projected to the text width (``Linear(D -> H)``), given learned image position embeddings (and,
with ``prefix_norm``, a LayerNorm, so that they enter the stream at the scale of the word
embeddings; then the text encoder's dropout) and put in front of the caption's embeddings
(``text_encoder.embed`` of ``[CLS] caption [SEP]``: ``[CLS]`` is the start token, ``[SEP]`` the
end).  The text encoder's
layers run over the whole sequence (:func:`~ptmkit.vision.streams.run_layers`) with the mask of
:func:`prefix_lm_mask`: the image prefix sees the prefix, caption position ``t`` sees the prefix
and the caption up to ``t``; padding is hidden as a key.

The loss is the next-token cross-entropy over the caption after ``[CLS]``, ``[SEP]`` included
(mean over the predicted tokens), with the output tied to the text input embeddings plus a bias of
its own, computed by :func:`~ptmkit.nn.linear_ce.linear_cross_entropy` (the ``[B, T, V]`` logits
are never stored).  Metrics: ``lm_loss``, ``lm_acc`` (argmax = the next token) and ``ppl``.

``score(i, j)``: the mean log-probability of caption ``j``'s predicted tokens given image ``i``,
for every pair, ``score_batch`` pairs per forward pass (:func:`~.pair_scores.score_pairs`); the
image encoder runs once per image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.host import count
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.log_probs import next_token_log_probs
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.registry import register
from ptmkit.train.step import StepOutput, input_tokens
from ptmkit.vision.objectives.base import VLObjective
from ptmkit.vision.objectives.pair_scores import score_pairs
from ptmkit.vision.streams import run_layers

ARGMAX_ROWS = 4096  # rows of logits formed at a time for lm_acc


@dataclass(frozen=True)
class CaptionLMConfig:
    score_batch: int = 256  # (image, caption) pairs per forward pass in score(); images per image-encoder pass
    prefix_norm: bool = True  # LayerNorm over the projected image tokens + their positions


def prefix_lm_mask(n_prefix: int, text_mask: torch.Tensor) -> torch.Tensor:
    """``[B, 1, P + T, P + T]`` bool (True = may attend) for ``P`` prefix positions followed by a
    text of ``text_mask [B, T]`` (1 = real): the prefix sees the prefix, text position ``t`` sees
    the prefix and the real text positions ``<= t``."""
    B, T = text_mask.shape
    L = n_prefix + T
    base = torch.ones(L, L, dtype=torch.bool, device=text_mask.device).tril()
    base[:n_prefix, :n_prefix] = True
    keys = torch.cat([torch.ones(B, n_prefix, dtype=torch.bool, device=text_mask.device), text_mask.bool()], 1)
    return base[None, None] & keys[:, None, None, :]


def caption_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T - 1]``: the token each text position ``0 .. T-2`` predicts (the next real one),
    :data:`IGNORE_INDEX` where the next position is padding."""
    return input_ids[:, 1:].masked_fill(~attention_mask[:, 1:].bool(), IGNORE_INDEX)


@torch.no_grad()
def argmax_rows(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, rows: int = ARGMAX_ROWS) -> torch.Tensor:
    """``argmax(h W^T + b)`` for ``h [N, H]`` -> ``[N]``, ``rows`` rows of logits at a time."""
    parts = [torch.addmm(bias, h[i : i + rows], weight.t()).argmax(1) for i in range(0, h.shape[0], rows)]
    return torch.cat(parts) if parts else h.new_zeros(0, dtype=torch.long)


@register("vl_objective", "caption_lm")
class CaptionLM(VLObjective):
    """Image-prefixed caption language model (see the module docstring)."""

    name = "caption_lm"
    config_class = CaptionLMConfig
    text_encoder = True
    causal_text = True
    perplexity = "lm_loss"

    def __init__(self, cfg: CaptionLMConfig, image_encoder: nn.Module, text_encoder: nn.Module | None,
                 tokenizer: object) -> None:
        super().__init__(cfg, image_encoder, text_encoder, tokenizer)
        if text_encoder is None or getattr(text_encoder, "layers", None) is None:
            raise PtmError("the caption_lm objective needs a Transformer text encoder")
        if int(cfg.score_batch) < 1:
            raise PtmError(f"objective.score_batch must be a positive number of pairs, got {cfg.score_batch!r}")
        width = int(text_encoder.output_size)
        words = text_encoder.input_embeddings().weight
        if words.shape[1] != width:
            raise PtmError("the caption_lm objective ties its output to the word embeddings, which need the text "
                           "encoder's width (unset model.embedding_size)")
        tcfg = getattr(text_encoder, "config", None)
        std = float(getattr(tcfg, "init_std", 0.02))
        self.image_tokens = int(image_encoder.num_tokens)
        self.project = nn.Linear(int(image_encoder.output_size), width)
        self.image_positions = nn.Parameter(torch.empty(self.image_tokens, width))
        self.prefix_norm = nn.LayerNorm(width, eps=float(getattr(tcfg, "layer_norm_eps", 1e-12))) if cfg.prefix_norm else None
        self.dropout = Dropout(float(getattr(tcfg, "dropout", 0.0)))
        self.bias = nn.Parameter(torch.zeros(words.shape[0]))
        with torch.no_grad():
            self.project.weight.normal_(0.0, std)
            self.project.bias.zero_()
            self.image_positions.normal_(0.0, std)

    # -- the stream ---------------------------------------------------------------------------
    def prefix(self, image_encoder: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, S, S]`` -> the image prefix ``[B, N, H]``."""
        tokens = image_encoder(pixels).tokens
        if tokens.shape[1] != self.image_tokens:
            raise PtmError(f"the image encoder gave {tokens.shape[1]} region tokens, the caption LM was built for "
                           f"{self.image_tokens} (the image size changed?)")
        x = self.project(tokens) + self.image_positions
        if self.prefix_norm is not None:
            x = self.prefix_norm(x)
        return self.dropout(x)

    def text_states(self, text_encoder: nn.Module, prefix: torch.Tensor, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor) -> torch.Tensor:
        """The last states ``[B, T, H]`` of the text positions, after the prefix ``[B, N, H]``."""
        limit = text_encoder.max_positions()
        if limit is not None and input_ids.shape[1] > limit:
            raise PtmError(f"captions of {input_ids.shape[1]} tokens are longer than the text encoder's "
                           f"max_position {limit}")
        x = torch.cat([prefix, text_encoder.embed(input_ids)], 1)
        h, _ = run_layers(text_encoder, x, prefix_lm_mask(prefix.shape[1], attention_mask))
        return h[:, prefix.shape[1]:]

    def output(self, text_encoder: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """The tied output layer: ``(weight [V, H], bias [V])``."""
        return text_encoder.input_embeddings().weight, self.bias

    # -- the contract -------------------------------------------------------------------------
    def forward(self, image_encoder: nn.Module, text_encoder: nn.Module | None,
                batch: dict[str, torch.Tensor]) -> StepOutput:
        input_ids, mask = batch["input_ids"], batch["attention_mask"]
        h = self.text_states(text_encoder, self.prefix(image_encoder, batch["pixels"]), input_ids, mask)[:, :-1]
        labels = caption_targets(input_ids, mask)
        weight, bias = self.output(text_encoder)
        h, flat = h.flatten(0, 1), labels.flatten()
        loss = linear_cross_entropy(h, weight, bias, flat)
        valid = flat != IGNORE_INDEX
        hits = (argmax_rows(h.detach(), weight.detach(), bias.detach()) == flat) & valid
        acc = hits.sum() / valid.sum().clamp(min=1)
        metrics = {"lm_loss": loss.detach(), "lm_acc": acc, "ppl": loss.detach().exp()}
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=count(valid.sum()))

    @torch.no_grad()
    def score(self, image_encoder: nn.Module, text_encoder: nn.Module | None, pixels: torch.Tensor,
              input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[N, M]``: the mean log-probability of each caption's predicted tokens given each image
        (0 for a caption with none); in the modules' current mode (call ``eval()`` first)."""
        step = int(self.cfg.score_batch)
        n, m = pixels.shape[0], input_ids.shape[0]
        prefix = [self.prefix(image_encoder, pixels[i : i + step]) for i in range(0, n, step)]
        prefix = torch.cat(prefix) if prefix else None
        lengths = attention_mask.sum(1).cpu()  # each chunk is cut to its longest caption
        weight, bias = self.output(text_encoder)
        device = input_ids.device

        def pair_scores(image_index: torch.Tensor, text_index: torch.Tensor) -> torch.Tensor:
            T = max(int(lengths[text_index].max()), 1)
            texts = text_index.to(device)
            ids, mask = input_ids[texts, :T], attention_mask[texts, :T]
            h = self.text_states(text_encoder, prefix[image_index.to(device)], ids, mask)[:, :-1]
            valid = mask[:, 1:].bool()
            lp = next_token_log_probs(h, weight, bias, ids[:, 1:].masked_fill(~valid, 0))
            return (lp * valid).sum(1) / valid.sum(1).clamp(min=1)

        return score_pairs(pair_scores, n, m, step)


__all__ = ["CaptionLM", "CaptionLMConfig", "argmax_rows", "caption_targets", "prefix_lm_mask"]
