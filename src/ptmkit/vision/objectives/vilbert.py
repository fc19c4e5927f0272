"""ViLBERT (Lu et al. 2019, "ViLBERT: Pretraining Task-Agnostic Visiolinguistic Representations
for Vision-and-Language Tasks"): two streams, text and image, that exchange information through
co-attentional layers.

* Text stream: the text encoder, run as usual: ``h_t [B, T, H]`` (its last states).
* Image stream: the image encoder's tokens ``[B, N, D]`` with an [IMG] token in front, the mean of
  the region features (ViLBERT's mean region feature; taken after masking, so it never shows a
  masked region), then ``LayerNorm(W x + p_n)`` with ``W [Hi, D]`` and learned positions
  ``p_0 .. p_N`` (0 for [IMG]), dropout: ``h_v [B, N + 1, Hi]`` (``Hi = image_hidden``).
* ``co_layers`` co-attentional blocks owned by the objective, each: co-attention, text queries
  over the image stream's keys / values and image queries over the text's (padding keys hidden),
  both reading the states from before the block, each with a residual and LayerNorm
  (``h = LN(h + drop(CrossAttn(h, other)))``); then each stream's own post-LN Transformer layer
  (self-attention + feed-forward) of its width.  The co-attention is
  :class:`~ptmkit.encoders.encoder_decoder_layers.CrossAttention` with its key / value projection
  reading the other stream's width.  ``co_layers = 0``: the streams never meet before the heads.

Pre-training (one pass over the same inputs, as in the paper):

* masked multimodal modelling: text MLM (15 % of each caption's ordinary tokens, at least one;
  80 % [MASK], 10 % random, 10 % kept; BERT's head tied to the text input embeddings) and masked
  regions: ``mrm_prob`` of each image's tokens (at least one) are replaced by a learned mask
  vector ``[D]`` before the projection, and a head (dense + activation + LayerNorm + linear to
  ``D``) regresses the ORIGINAL image-encoder token at those positions: the squared error
  against the token normalised to zero mean and unit variance over its ``D`` features (as MAE's
  normalised-pixel targets; the target is detached, so the image encoder cannot shrink it),
  averaged over features and masked regions.  The paper instead predicts the distribution over
  the object classes a detector assigned to the region (KL divergence); we have no detector and
  no class distributions, so the region's own feature is the target.
* multimodal alignment: ``logit = w · (tanh(U h_IMG) ⊙ tanh(V h_CLS)) + b`` on the last states
  of [IMG] and [CLS], binary cross-entropy (label 1 = matched), with the negatives of VisualBERT
  (:func:`.pairs.sample_negatives`: a caption swapped for another concept's with probability
  ``negative_prob``).

Masked words and regions are predicted on the matched rows only (as the paper); every row is
corrupted alike, so corruption says nothing about matching.
``loss = mlm_loss + mrm_weight · mrm_loss + itm_weight · itm_loss``.

``score`` is the alignment logit of every (image, text) pair ``[N, M]``: each image stream and
each text stream is embedded once, then the co-attentional blocks and the alignment head run
``score_batch`` pairs at a time.  Randomness: PyTorch's default CPU generator (see :mod:`.pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.encoder_decoder_layers import CrossAttention
from ptmkit.encoders.transformer import TransformerLayer
from ptmkit.errors import PtmError
from ptmkit.nn.activations import get_activation
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
    choose,
    encode_images,
    init_weights,
    matching_loss,
    sample_negatives,
    transformer_config,
)


def _positive_int(name: str, value, allow_none: bool = True, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        raise PtmError(f"objective.{name} must be an integer >= {0 if allow_zero else 1}"
                       f"{' or null' if allow_none else ''}, got {value!r}")


@dataclass(frozen=True)
class ViLBERTConfig:
    co_layers: int = 2  # co-attentional blocks
    image_hidden: int | None = None  # Hi, the image stream's width; null = the text encoder's hidden size
    image_heads: int | None = None  # the image stream's heads; null = the text encoder's
    image_intermediate: int | None = None  # the image stream's feed-forward size; null = 4 Hi
    mlm_prob: float = 0.15  # share of each caption's ordinary tokens predicted (at least one)
    mrm_prob: float = 0.15  # share of each image's tokens masked and regressed (at least one)
    mrm_weight: float = 1.0
    itm_weight: float = 1.0
    negative_prob: float = 0.5  # probability that a row's caption is swapped for another concept's
    score_batch: int = 256  # (image, text) pairs per pass through the co-attentional blocks in score()

    def __post_init__(self) -> None:
        _positive_int("co_layers", self.co_layers, allow_none=False, allow_zero=True)
        for name in ("image_hidden", "image_heads", "image_intermediate"):
            _positive_int(name, getattr(self, name))
        _positive_int("score_batch", self.score_batch, allow_none=False)
        for name in ("mlm_prob", "mrm_prob"):
            p = check_probability(name, getattr(self, name))
            if p <= 0:
                raise PtmError(f"objective.{name} must be in (0, 1), got {getattr(self, name)!r}")
            object.__setattr__(self, name, p)
        object.__setattr__(self, "negative_prob", check_probability("negative_prob", self.negative_prob))
        for name in ("mrm_weight", "itm_weight"):
            try:
                w = float(getattr(self, name))
            except (TypeError, ValueError):
                w = -1.0
            if w < 0:
                raise PtmError(f"objective.{name} must be a number >= 0, got {getattr(self, name)!r}")
            object.__setattr__(self, name, w)


def _cross(queries: int, memory: int, heads: int, dropout: float) -> CrossAttention:
    """Cross-attention whose queries have width ``queries`` and whose keys / values are read from
    states of width ``memory`` (``kv.weight [2 queries, memory]``)."""
    attn = CrossAttention(queries, heads, dropout)
    attn.kv = nn.Linear(memory, 2 * queries)
    return attn


class CoAttentionBlock(nn.Module):
    """``(h_t [B, T, H], h_v [B, R, Hi]) -> (h_t, h_v)``: co-attention (each stream's queries over
    the other's keys / values; residual + LayerNorm), then each stream's Transformer layer.
    Parameters: ``text_cross.*``, ``text_norm.*``, ``image_cross.*``, ``image_norm.*``,
    ``text_layer.*``, ``image_layer.*``."""

    def __init__(self, text_cfg, image_cfg) -> None:
        super().__init__()
        H, Hi = text_cfg.hidden_size, image_cfg.hidden_size
        self.text_cross = _cross(H, Hi, text_cfg.num_heads, text_cfg.attention_dropout)
        self.image_cross = _cross(Hi, H, image_cfg.num_heads, image_cfg.attention_dropout)
        self.text_norm = nn.LayerNorm(H, eps=text_cfg.layer_norm_eps)
        self.image_norm = nn.LayerNorm(Hi, eps=image_cfg.layer_norm_eps)
        self.dropout = Dropout(text_cfg.dropout)
        self.text_layer = TransformerLayer(text_cfg)
        self.image_layer = TransformerLayer(image_cfg)

    def forward(self, t: torch.Tensor, v: torch.Tensor,
                text_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """text_keys ``[B, 1, 1, T]`` (bool, True = a real token): the text keys anything may attend to."""
        t_new = self.text_norm(t + self.dropout(self.text_cross(t, self.text_cross.project_memory(v), None)))
        v_new = self.image_norm(v + self.dropout(self.image_cross(v, self.image_cross.project_memory(t), text_keys)))
        return self.text_layer(t_new, text_keys, False), self.image_layer(v_new, None, False)


class ImageStream(nn.Module):
    """Image tokens ``[B, N, D]`` (and the masked ones ``[B, N]`` bool) -> ``[B, N + 1, Hi]``:
    [IMG] (the mean token) then the tokens, masked ones replaced by ``mask_vector [D]``, projected,
    plus positions, LayerNorm, dropout."""

    def __init__(self, in_size: int, num_tokens: int, image_cfg) -> None:
        super().__init__()
        Hi = image_cfg.hidden_size
        self.project = nn.Linear(in_size, Hi)
        self.mask_vector = nn.Parameter(torch.zeros(in_size))
        self.positions = nn.Embedding(num_tokens + 1, Hi)
        self.norm = nn.LayerNorm(Hi, eps=image_cfg.layer_norm_eps)
        self.dropout = Dropout(image_cfg.dropout)
        init_weights(self, image_cfg.init_std)
        with torch.no_grad():
            self.mask_vector.normal_(0.0, image_cfg.init_std)

    def forward(self, tokens: torch.Tensor, masked: torch.Tensor | None = None) -> torch.Tensor:
        N = tokens.shape[1]
        if N + 1 > self.positions.num_embeddings:
            raise PtmError(f"the image encoder gave {N} tokens, the image stream has positions for "
                           f"{self.positions.num_embeddings - 1}")
        if masked is not None:
            tokens = torch.where(masked[..., None], self.mask_vector.to(tokens.dtype), tokens)
        x = torch.cat([tokens.mean(dim=1, keepdim=True), tokens], dim=1)
        return self.dropout(self.norm(self.project(x) + self.positions.weight[: N + 1]))


@register("vl_objective", "vilbert")
class ViLBERT(VLObjective):
    """Two streams joined by co-attention; masked multimodal modelling + alignment (module docstring).

    Parameters of its own: ``image_stream.*``, ``blocks.{i}.*`` (:class:`CoAttentionBlock`),
    ``mlm.head.*``, ``region_head.*``, ``text_pool.*``, ``image_pool.*``, ``itm.*``.
    Batch: ``pixels [B, 3, S, S]``, ``input_ids [B, T]``, ``attention_mask [B, T]``, optionally
    ``concept [B]``.  Metrics: ``mlm_loss``, ``mlm_acc``, ``mrm_loss``, ``itm_loss``, ``itm_acc``."""

    name = "vilbert"
    config_class = ViLBERTConfig
    image_encoders = ("cnn", "vit")
    text_encoder = True

    def __init__(self, cfg: ViLBERTConfig, image_encoder: nn.Module, text_encoder: nn.Module | None,
                 tokenizer) -> None:
        super().__init__(cfg, image_encoder, text_encoder, tokenizer)
        text_cfg = transformer_config(text_encoder, self.name)
        Hi = cfg.image_hidden or text_cfg.hidden_size
        heads = cfg.image_heads or text_cfg.num_heads
        if Hi % heads:
            raise PtmError(f"objective.image_hidden={Hi} is not divisible by objective.image_heads={heads}")
        # the objective's own layers: the text encoder's settings, post-LN, unshared, unpruned
        own = dict(norm="post", pruned_heads={}, sharing="none", layerdrop=0.0, embedding_size=None, num_layers=1)
        text_layer_cfg = replace(text_cfg, **own)
        image_cfg = replace(text_cfg, hidden_size=Hi, num_heads=heads,
                            intermediate_size=cfg.image_intermediate or 4 * Hi, **own)
        H, D = text_cfg.hidden_size, image_encoder.output_size
        self.image_stream = ImageStream(D, image_encoder.num_tokens, image_cfg)
        self.blocks = nn.ModuleList(CoAttentionBlock(text_layer_cfg, image_cfg) for _ in range(cfg.co_layers))
        self.masker = TokenMasker(tokenizer, text_cfg.vocab_size, cfg.mlm_prob)
        self.mlm = TiedMLM(text_encoder)
        self.region_head = nn.Sequential(nn.Linear(Hi, Hi), _Activation(text_cfg.activation),
                                         nn.LayerNorm(Hi, eps=text_cfg.layer_norm_eps), nn.Linear(Hi, D))
        self.text_pool = nn.Linear(H, H)
        self.image_pool = nn.Linear(Hi, H)
        self.itm = nn.Linear(H, 1)
        for module in (self.blocks, self.region_head, self.text_pool, self.image_pool, self.itm):
            init_weights(module, text_cfg.init_std)

    # -- the streams ------------------------------------------------------------------------
    @staticmethod
    def text_states(text_encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The text stream's input: the text encoder's last states ``[B, T, H]``."""
        return text_encoder(input_ids, attention_mask=attention_mask).last_hidden_state

    def co_attend(self, t: torch.Tensor, v: torch.Tensor,
                  attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``h_t [B, T, H]``, ``h_v [B, N + 1, Hi]``, the captions' ``attention_mask [B, T]`` ->
        both streams after the co-attentional blocks."""
        text_keys = attention_mask.bool()[:, None, None, :]
        v = v.to(t.dtype)
        for block in self.blocks:
            t, v = block(t, v, text_keys)
        return t, v

    def streams(self, image_encoder: nn.Module, text_encoder: nn.Module, pixels: torch.Tensor,
                input_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_regions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Both streams' last states for image–caption pairs: ``([B, T, H], [B, N + 1, Hi])``."""
        v = self.image_stream(image_encoder(pixels).tokens, masked_regions)
        return self.co_attend(self.text_states(text_encoder, input_ids, attention_mask), v, attention_mask)

    def align(self, t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Alignment logits ``[B]`` from ``h_CLS = t[:, 0]`` and ``h_IMG = v[:, 0]``."""
        return self.itm(torch.tanh(self.text_pool(t[:, 0])) * torch.tanh(self.image_pool(v[:, 0]))).squeeze(-1)

    def region_loss(self, v: torch.Tensor, tokens: torch.Tensor, predict: torch.Tensor) -> torch.Tensor:
        """Mean squared error of the region head on the regions ``predict [B, N]`` (bool) of the image
        stream's region states ``v [B, N, Hi]`` against the original tokens ``[B, N, D]``, each
        normalised over its features (detached); 0 when no region is predicted."""
        target = F.layer_norm(tokens.detach().float(), tokens.shape[-1:])
        error = (self.region_head(v).float() - target).pow(2).mean(dim=-1)  # [B, N]
        weight = predict.float()
        return (error * weight).sum() / weight.sum().clamp(min=1.0)

    # -- the contract ----------------------------------------------------------------------
    def forward(self, image_encoder: nn.Module, text_encoder: nn.Module | None,
                batch: dict[str, torch.Tensor]) -> StepOutput:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        B, T = ids.shape
        image = image_encoder(batch["pixels"])
        partner, matched = sample_negatives(B, self.cfg.negative_prob, ids.device, batch.get("concept"))
        ids, mask = ids[partner], mask[partner]
        corrupted, labels = self.masker(ids, mask)
        labels = labels.masked_fill(~matched[:, None], IGNORE_INDEX)  # predicted on matched rows only
        regions = choose(torch.ones(image.tokens.shape[:2], dtype=torch.bool, device=ids.device), self.cfg.mrm_prob)
        v = self.image_stream(image.tokens, regions)
        t, v = self.co_attend(self.text_states(text_encoder, corrupted, mask), v, mask)
        mlm_loss, mlm_acc, _ = self.mlm(t, labels, text_encoder.input_embeddings().weight)
        mrm_loss = self.region_loss(v[:, 1:], image.tokens, regions & matched[:, None])
        itm_loss, itm_acc = matching_loss(self.align(t, v), matched)
        loss = mlm_loss + self.cfg.mrm_weight * mrm_loss + self.cfg.itm_weight * itm_loss
        metrics = {"mlm_loss": mlm_loss.detach(), "mlm_acc": mlm_acc, "mrm_loss": mrm_loss.detach(),
                   "itm_loss": itm_loss.detach(), "itm_acc": itm_acc}
        n_tokens = input_tokens({"attention_mask": mask})  # the caption tokens read
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=B)

    def score(self, image_encoder: nn.Module, text_encoder: nn.Module | None, pixels: torch.Tensor,
              input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The alignment logit of every (image, text) pair, ``[N, M]``: images and texts are encoded
        once each (``score_batch`` at a time), the co-attentional blocks run per chunk of pairs."""
        chunk = self.cfg.score_batch
        tokens, _ = encode_images(image_encoder, pixels, chunk)
        v0 = self.image_stream(tokens)  # [N, R + 1, Hi]
        M = input_ids.shape[0]
        t0 = torch.cat([self.text_states(text_encoder, input_ids[i:i + chunk], attention_mask[i:i + chunk])
                        for i in range(0, M, chunk)]) if M else None

        def pair_logits(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            return self.align(*self.co_attend(t0[j], v0[i], attention_mask[j]))

        return score_pairs(pair_logits, pixels.shape[0], M, chunk)


class _Activation(nn.Module):
    """A named activation (:func:`ptmkit.nn.activations.get_activation`) as a module."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.fn = get_activation(name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


__all__ = ["CoAttentionBlock", "ImageStream", "ViLBERT", "ViLBERTConfig"]
