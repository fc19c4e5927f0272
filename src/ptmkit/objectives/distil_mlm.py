"""Task-agnostic distillation of a pre-trained encoder on a corpus (DistilBERT; TinyBERT's general
distillation), as a pre-training objective: ``objective: {name: distil_mlm, teacher: PATH, ...}``.

Both models read the same masked batch (BERT's masking, as in DistilBERT).  The loss
(Sanh et al. 2019, eq. 1 and §3; Jiao et al. 2020, eq. 7-10)::

    soft · T² · CE(teacher MLM_T, student MLM_T)  +  mlm · CE(student MLM, tokens)
    + cosine · (1 - cos(h_S, h_T))  +  hidden · Σ_m MSE(H_S^m W_h, H_T^g(m))
    + attention · Σ_m MSE(A_S^m, A_T^g(m))

over the masked positions (the first two) and the real tokens (the rest).  DistilBERT's triple loss
is ``soft=5 mlm=2 cosine=1``; TinyBERT's general distillation ``hidden=1 attention=1``.  A teacher
without a pre-trained MLM head (a sentence encoder such as all-MiniLM-L6-v2, whose release has none)
must use ``soft=0``.  ``init_layers`` starts the student from the teacher's layers (DistilBERT:
one of two), embeddings and pooler included, when the student is built; the teacher is loaded then
too, kept outside the module tree (never trained, never saved) and must share the tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ptmkit.compress.losses import attention_mse, cosine_loss, hidden_mse, layer_map, soft_cross_entropy
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import StepOutput, TokenizerLike
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.pretrained import load_pretrained
from ptmkit.registry import register


def check_teacher_settings(cfg: Any, weights: tuple[str, ...]) -> None:
    """What both distillation objectives' configs require: a teacher, and loss weights >= 0."""
    if not cfg.teacher:
        raise PtmError("objective.teacher: give the teacher's run or checkpoint directory")
    for name in weights:
        if float(getattr(cfg, name)) < 0:
            raise PtmError(f"objective.{name} is a loss weight: give a number >= 0")


@dataclass(frozen=True)
class DistilMLMConfig(MLMConfig):
    """teacher: its run or checkpoint; soft / mlm / cosine / hidden / attention: loss weights;
    temperature: T; layer_map: student -> teacher layers (``uniform``, ``last``, ``1:2,2:4``);
    init_layers: ``"1,3,5"``, the teacher layers the student starts from (``""``: its own init)."""

    teacher: str = ""
    soft: float = 0.0
    mlm: float = 1.0
    cosine: float = 1.0
    hidden: float = 0.0
    attention: float = 0.0
    temperature: float = 2.0
    layer_map: str = "uniform"
    init_layers: str = ""
    nsp: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_teacher_settings(self, ("soft", "mlm", "cosine", "hidden", "attention"))
        if self.nsp:
            raise PtmError("objective.nsp: distillation trains no next-sentence head; set objective.nsp=false")


@register("objective", "distil_mlm")
class DistilMLM(MaskedLM):
    """The student's MLM objective plus the teacher's signals (see the module docstring)."""

    config_class = DistilMLMConfig
    hf_heads = ("mlm",)
    serves_as = "mlm"  # the teacher is needed in training only

    def __init__(self, cfg: DistilMLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        attach_teacher(self, cfg, encoder, tokenizer, heads=cfg.soft > 0)

    def _teacher_encoder(self) -> nn.Module:
        return self.teacher.backbone if hasattr(self.teacher, "objective") else self.teacher

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        cfg = self.cfg
        mask = batch["attention_mask"]
        inner = cfg.hidden > 0 or cfg.attention > 0
        args = dict(attention_mask=mask, token_type_ids=batch.get("token_type_ids"), output_hidden_states=inner,
                    output_attentions=cfg.attention > 0)
        out = backbone(batch["input_ids"], **args)
        t_enc = self._teacher_encoder()
        t_enc.to(out.last_hidden_state.device)
        with torch.no_grad():
            t_out = t_enc(batch["input_ids"], **args)
        loss, metrics, n_predictions = self.mlm_loss(out.last_hidden_state, batch, backbone.output_embeddings())
        total = cfg.mlm * loss
        if cfg.soft > 0:
            rows, slots = (batch["mlm_labels"] != IGNORE_INDEX).nonzero(as_tuple=True)
            pos = batch["mlm_positions"][rows, slots]
            s_logits = self.mlm_head(out.last_hidden_state[rows, pos], backbone.output_embeddings())
            with torch.no_grad():
                head = self.teacher.objective.mlm_head
                t_logits = head(t_out.last_hidden_state[rows, pos], t_enc.output_embeddings())
            soft = soft_cross_entropy(s_logits, t_logits, cfg.temperature)
            metrics["soft_loss"] = soft.detach()
            total = total + cfg.soft * soft
        total = total + inner_losses(self, out, t_out, mask, metrics)
        return StepOutput(loss=total, metrics=metrics, n_tokens=int(mask.sum()), n_predictions=n_predictions)


def attach_teacher(objective: nn.Module, cfg: Any, encoder: Encoder, tokenizer: Any, heads: bool) -> None:
    """Load ``cfg.teacher`` (with its objective's heads when ``heads``) into ``objective.teacher``,
    outside the module tree and frozen; check the tokenizer; set the layer map and the projection
    ``objective.proj``; start the student ``encoder`` from the teacher's ``cfg.init_layers``."""
    teacher = load_pretrained(cfg.teacher, heads=heads)
    sha = getattr(tokenizer, "sha256", None)
    if sha is not None and teacher.tokenizer.sha256() != tokenizer.sha256():
        raise PtmError(f"the teacher {cfg.teacher} uses another tokenizer than the corpus: teacher and student must "
                       f"share one; prepare the corpus with the teacher's tokenizer.json")
    object.__setattr__(objective, "teacher", teacher.model if heads else teacher.backbone)
    objective.teacher.eval().requires_grad_(False)
    t_enc = teacher.backbone
    if cfg.hidden > 0 or cfg.attention > 0:
        objective.map = layer_map(cfg.layer_map, encoder.num_layers, t_enc.num_layers)
    s_width, t_width = encoder.output_size, t_enc.output_size
    if cfg.cosine > 0 and s_width != t_width:
        raise PtmError(f"objective.cosine aligns hidden states of one width; the student is {s_width} wide, the "
                       f"teacher {t_width}: use objective.hidden (a learned projection) instead")
    objective.proj = nn.Linear(s_width, t_width) if cfg.hidden > 0 and s_width != t_width else None
    if cfg.init_layers:
        start_from_teacher(encoder, t_enc, [int(i) for i in cfg.init_layers.split(",")])


def inner_losses(objective: nn.Module, out: Any, t_out: Any, mask: torch.Tensor, metrics: dict) -> torch.Tensor:
    """``cosine · (1 - cos) + hidden · Σ MSE + attention · Σ MSE`` of the student's and the
    teacher's encoder outputs over the real tokens; each term is logged in ``metrics``."""
    cfg = objective.cfg
    total = out.last_hidden_state.new_zeros(())
    if cfg.cosine > 0:
        cos = cosine_loss(out.last_hidden_state, t_out.last_hidden_state, mask)
        metrics["cosine_loss"] = cos.detach()
        total = total + cfg.cosine * cos
    if cfg.hidden > 0:
        proj = objective.proj or (lambda x: x)
        h = sum(hidden_mse(proj(out.hidden_states[m]), t_out.hidden_states[n], mask) for m, n in objective.map.items())
        metrics["hidden_loss"] = h.detach()
        total = total + cfg.hidden * h
    if cfg.attention > 0:
        a = sum(attention_mse(out.attentions[m - 1], t_out.attentions[n - 1], mask)
                for m, n in objective.map.items() if m > 0 and n > 0)
        metrics["attention_loss"] = a.detach()
        total = total + cfg.attention * a
    return total


def start_from_teacher(student: Any, teacher: Any, layers: list[int]) -> None:
    """Copy the teacher's embeddings, pooler and final norm and its ``layers`` (in order) into the
    student encoder, which must have ``len(layers)`` layers of the teacher's shape."""
    if len(layers) != len(student.layers):
        raise PtmError(f"objective.init_layers names {len(layers)} teacher layers for a student of "
                       f"{len(student.layers)}: give one per student layer")
    bad = [i for i in layers if not 0 <= i < len(teacher.layers)]
    if bad:
        raise PtmError(f"objective.init_layers: the teacher has layers 0 .. {len(teacher.layers) - 1}, not {bad[0]}")
    state = {}
    for k, v in teacher.state_dict().items():
        if k.startswith("layers."):
            i, rest = k[len("layers."):].split(".", 1)
            if int(i) in layers:
                state[f"layers.{layers.index(int(i))}.{rest}"] = v
        else:
            state[k] = v
    try:
        student.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise PtmError(f"objective.init_layers: the student's layers are not the teacher's shape "
                       f"({str(exc).splitlines()[0]}); keep the teacher's model settings but num_layers") from None


__all__ = ["DistilMLM", "DistilMLMConfig", "attach_teacher", "check_teacher_settings", "inner_losses", "start_from_teacher"]
