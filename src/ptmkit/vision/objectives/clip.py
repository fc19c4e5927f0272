"""CLIP: contrastive language–image pre-training (Radford et al. 2021).

A dual encoder: the image encoder's pooled vector and the text encoder's pooled caption state are
projected (no bias) into one ``embed_dim`` space; over a batch of ``B`` pairs the ``[B, B]`` cosine
similarities scaled by ``1 / τ`` are the logits of two cross-entropies, image -> text (each row's
caption among the batch's captions) and text -> image, averaged (:func:`symmetric_info_nce`).
``τ`` is learnt as ``log(1/τ)`` from ``temperature`` (CLIP: 0.07), with ``1/τ`` clipped at
``max_logit_scale`` (100) "to prevent training instability"; ``learnable_temperature=false``
keeps it fixed (the ablation).  ``score`` is the cosine similarity.

Text pooling: ``cls`` (the ``[CLS]`` state, BERT's convention), ``mean`` (over the real tokens:
sentence-transformers' MiniLM is trained so) or ``last`` (the final ``[SEP]``, as CLIP reads its
``[EOS]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.errors import PtmError
from ptmkit.nn.info_nce import symmetric_info_nce
from ptmkit.nn.pooling import POOLINGS, pool
from ptmkit.registry import register
from ptmkit.train.step import StepOutput
from ptmkit.vision.objectives.base import VLObjective


@dataclass(frozen=True)
class CLIPConfig:
    embed_dim: int = 128
    temperature: float = 0.07
    learnable_temperature: bool = True
    max_logit_scale: float = 100.0
    text_pooling: str = "cls"


@register("vl_objective", "clip")
class CLIP(VLObjective):
    name = "clip"
    config_class = CLIPConfig

    def __init__(self, cfg: CLIPConfig, image_encoder: nn.Module, text_encoder: nn.Module | None, tokenizer) -> None:
        super().__init__(cfg, image_encoder, text_encoder, tokenizer)
        if cfg.text_pooling not in POOLINGS:
            raise PtmError(f"objective.text_pooling={cfg.text_pooling!r}: one of {', '.join(POOLINGS)}")
        if not 0 < cfg.temperature:
            raise PtmError(f"objective.temperature must be positive, got {cfg.temperature}")
        self.image_projection = nn.Linear(image_encoder.output_size, cfg.embed_dim, bias=False)
        self.text_projection = nn.Linear(text_encoder.output_size, cfg.embed_dim, bias=False)
        for proj in (self.image_projection, self.text_projection):
            nn.init.normal_(proj.weight, std=proj.in_features ** -0.5)
        scale = torch.tensor(math.log(1.0 / cfg.temperature))
        if cfg.learnable_temperature:
            self.log_scale = nn.Parameter(scale)
        else:
            self.register_buffer("log_scale", scale)

    def image_embeddings(self, image_encoder: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, S, S]`` -> ``[B, embed_dim]`` (not normalised)."""
        return self.image_projection(image_encoder(pixels).pooled)

    def text_embeddings(self, text_encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``input_ids [B, T]`` -> ``[B, embed_dim]`` (not normalised)."""
        states = text_encoder(input_ids, attention_mask).last_hidden_state
        return self.text_projection(pool(states, attention_mask, self.cfg.text_pooling))

    def temperature(self) -> torch.Tensor:
        """``τ = 1 / min(exp(log_scale), max_logit_scale)`` (a 0-d tensor)."""
        return 1.0 / self.log_scale.exp().clamp(max=self.cfg.max_logit_scale)

    def forward(self, image_encoder, text_encoder, batch) -> StepOutput:
        img = self.image_embeddings(image_encoder, batch["pixels"])
        txt = self.text_embeddings(text_encoder, batch["input_ids"], batch["attention_mask"])
        tau = self.temperature()
        loss = symmetric_info_nce(img, txt, tau)
        with torch.no_grad():
            sim = F.normalize(img.float(), dim=-1) @ F.normalize(txt.float(), dim=-1).T
            target = torch.arange(sim.shape[0], device=sim.device)
            metrics = {"clip_loss": loss.detach(), "i2t_acc": (sim.argmax(1) == target).float().mean(),
                       "t2i_acc": (sim.argmax(0) == target).float().mean(), "temperature": tau.detach()}
        n = batch["input_ids"].shape[0]
        return StepOutput(loss, metrics, n_tokens=int(batch["attention_mask"].sum()), n_predictions=n)

    def score(self, image_encoder, text_encoder, pixels, input_ids, attention_mask) -> torch.Tensor:
        img = F.normalize(self.image_embeddings(image_encoder, pixels), dim=-1)
        txt = F.normalize(self.text_embeddings(text_encoder, input_ids, attention_mask), dim=-1)
        return img @ txt.T
