"""Distillation of a causal language model into a smaller one on a corpus, as a pre-training
objective: ``objective: {name: distil_clm, teacher: PATH, ...}`` (DistilGPT2 is trained this way).

The student reads the teacher's LM blocks (the ``clm`` objective's stream) and learns, at every
predicted position, the teacher's next-token distribution at temperature ``T`` beside the next token
itself (Hinton et al. 2015; Sanh et al. 2019)::

    soft · T² · CE(softmax(z_T / T), softmax(z_S / T)) + clm · CE(z_S, next token)
    + cosine · (1 - cos(h_S, h_T)) + hidden · Σ_m MSE(H_S^m W_h, H_T^g(m)) + attention · Σ_m MSE(A_S^m, A_T^g(m))

Both output layers are the tied word embeddings; the ``[N, V]`` logits of both models are formed
``chunk`` rows at a time, each chunk's student logits recomputed in the backward pass (activation
checkpointing), so a large vocabulary costs ``chunk x V`` floats, not ``B T x V``.  The held-out
``clm_loss`` is the student's own perplexity, comparable with the teacher's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from ptmkit.compress.losses import soft_cross_entropy
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import StepOutput, TokenizerLike
from ptmkit.objectives.clm import CausalLM, CLMConfig
from ptmkit.objectives.distil_mlm import attach_teacher, check_teacher_settings, inner_losses
from ptmkit.registry import register


@dataclass(frozen=True)
class DistilCLMConfig(CLMConfig):
    """As :class:`ptmkit.objectives.distil_mlm.DistilMLMConfig`, with ``clm`` the weight of the student's
    own next-token loss; chunk: rows of the ``[N, V]`` logits formed at a time."""

    teacher: str = ""
    soft: float = 1.0
    clm: float = 1.0
    cosine: float = 0.0
    hidden: float = 0.0
    attention: float = 0.0
    temperature: float = 2.0
    layer_map: str = "uniform"
    init_layers: str = ""
    chunk: int = 1024

    def __post_init__(self) -> None:
        check_teacher_settings(self, ("soft", "clm", "cosine", "hidden", "attention"))


def _soft_chunk(h_s: torch.Tensor, w_s: torch.Tensor, z_t: torch.Tensor, temperature: float) -> torch.Tensor:
    return soft_cross_entropy(h_s @ w_s.t(), z_t, temperature) * h_s.shape[0]


@register("objective", "distil_clm")
class DistilCLM(CausalLM):
    """The student's next-token objective plus the teacher's distributions (see the module docstring)."""

    config_class = DistilCLMConfig
    perplexity = "clm_loss"  # the student's own; the loss adds the teacher's terms
    serves_as = "clm"  # the teacher is needed in training only

    def __init__(self, cfg: DistilCLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        attach_teacher(self, cfg, encoder, tokenizer, heads=False)
        if self.teacher.output_embeddings() is None:
            raise PtmError("the teacher has no tied output layer: distil a causal LM trained with the clm objective")

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        cfg = self.cfg
        ids, labels = batch["input_ids"], batch["labels"]
        mask = batch.get("attention_mask")
        real = mask if mask is not None else torch.ones_like(ids)
        inner = cfg.hidden > 0 or cfg.attention > 0
        args = dict(attention_mask=mask, causal=True, output_hidden_states=inner, output_attentions=cfg.attention > 0)
        out = backbone(ids, **args)
        self.teacher.to(ids.device)
        with torch.no_grad():
            t_out = self.teacher(ids, **args)
        h = out.last_hidden_state.flatten(0, 1)
        clm = linear_cross_entropy(h, backbone.output_embeddings(), None, labels.flatten())
        metrics = {"clm_loss": clm.detach()}
        total = cfg.clm * clm
        if cfg.soft > 0:
            rows = (labels.flatten() != IGNORE_INDEX).nonzero(as_tuple=True)[0]
            h_s, h_t = h[rows], t_out.last_hidden_state.flatten(0, 1)[rows]
            w_s, w_t = backbone.output_embeddings(), self.teacher.output_embeddings()
            soft = h.new_zeros(())
            for start in range(0, len(rows), cfg.chunk):
                part = slice(start, start + cfg.chunk)
                with torch.no_grad():
                    z_t = h_t[part] @ w_t.t()
                soft = soft + checkpoint(_soft_chunk, h_s[part], w_s, z_t, cfg.temperature, use_reentrant=False)
            soft = soft / max(len(rows), 1)
            metrics["soft_loss"] = soft.detach()
            total = total + cfg.soft * soft
        total = total + inner_losses(self, out, t_out, real, metrics)
        n_pred = int((labels != IGNORE_INDEX).sum())
        return StepOutput(loss=total, metrics=metrics, n_tokens=int(real.sum()), n_predictions=n_pred)


__all__ = ["DistilCLM", "DistilCLMConfig"]
