"""BERT-of-Theseus (Xu et al. 2020): compression by progressive module replacing.

The fine-tuned predecessor's ``N`` layers are cut into ``M`` consecutive modules (6 layers, 3
modules: layers 0-1, 2-3, 4-5); each module has a one-layer successor (initialised from one of the
predecessor's layers, by default the module's last, like a DistilBERT student).  In each training
step every module independently runs its successor with probability ``p`` and its predecessor
otherwise, so the successors learn to work inside the predecessor; the predecessor's layers stay
fixed, the embeddings and the task head (shared) train.  ``p`` follows the paper's linear
curriculum ``p = min(1, b + k t)``: from ``rate`` at the start to 1 at ``full_at`` of training,
after which only the successors run (the paper's successor fine-tuning phase).  The result is the
compact successor: an ordinary ``M``-layer task model.

The draws come from PyTorch's CPU generator and the step count is a buffer of the module, so a
resumed run replaces the modules the uninterrupted one would.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ptmkit.compress.students import copy_head
from ptmkit.errors import PtmError
from ptmkit.tasks.saved import encoder_of
from ptmkit.tasks.training import Training
from ptmkit.train.step import StepOutput


def modules_of(num_layers: int, modules: int) -> list[list[int]]:
    """The predecessor's layers cut into ``modules`` consecutive groups of (nearly) equal size."""
    if not 1 <= modules <= num_layers:
        raise PtmError(f"{modules} successor modules for a predecessor of {num_layers} layers: give 1 .. {num_layers}")
    bounds = [round(i * num_layers / modules) for i in range(modules + 1)]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


class ModuleReplacing(nn.Module):
    """The trained module: the successor task model (``student``; its encoder first, as ``backbone``)
    and the predecessor's frozen layer groups (``predecessor``)."""

    def __init__(self, student: nn.Module, predecessor: list[list[nn.Module]], rate: float, full_at_step: int) -> None:
        super().__init__()
        self.backbone = encoder_of(student)
        self.student = student
        if len(predecessor) != len(self.backbone.layers):
            raise PtmError(f"{len(predecessor)} predecessor modules for {len(self.backbone.layers)} successor layers")
        self.predecessor = nn.ModuleList(nn.ModuleList(group) for group in predecessor)
        self.predecessor.requires_grad_(False)
        self.rate, self.full_at_step = float(rate), max(1, int(full_at_step))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def replacement_rate(self) -> float:
        """``min(1, b + k t)`` with ``b = rate`` and ``k`` reaching 1 at ``full_at_step``."""
        t = int(self.steps)
        return min(1.0, self.rate + (1.0 - self.rate) * t / self.full_at_step)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        p = self.replacement_rate()
        successors = self.backbone.layers
        if p < 1.0:
            use = (torch.rand(len(successors)) < p).tolist()
            mixed = [layer for i, succ in enumerate(successors)
                     for layer in ([succ] if use[i] else list(self.predecessor[i]))]
            self.predecessor.eval()  # fixed layers: no dropout either
            self.backbone.layers = nn.ModuleList(mixed)
        try:
            out = self.student(batch)
        finally:
            self.backbone.layers = successors
        self.steps += 1
        out.metrics["replacement_rate"] = torch.tensor(p)
        return out


class Theseus(Training):
    """Module replacing from the teacher task model ``teacher`` onto the student built from its
    layers (one successor layer per module); ``total_steps``: the run's optimizer steps."""

    activity = "module replacing"

    def __init__(self, teacher: nn.Module, rate: float, full_at: float, epochs: int, source: dict[str, Any],
                 student: dict[str, Any]) -> None:
        if not 0.0 < rate <= 1.0:
            raise PtmError(f"the replacement rate starts in (0, 1], got {rate}")
        if not 0.0 < full_at <= 1.0:
            raise PtmError(f"full_at is the fraction of training at which every module is replaced: (0, 1], got {full_at}")
        self.teacher, self.rate, self.full_at, self.epochs = teacher, rate, full_at, epochs
        self.source, self.student = source, student

    def wrap(self, model: nn.Module, task: Any, encoded: dict[str, Any], batches: Any, seed: int):
        copy_head(model, self.teacher)
        t_enc = encoder_of(self.teacher)
        if not hasattr(t_enc, "layers"):
            raise PtmError(f"module replacing needs a Transformer predecessor; this one is {t_enc.name!r}")
        groups = modules_of(len(t_enc.layers), len(encoder_of(model).layers))
        predecessor = [[copy.deepcopy(t_enc.layers[i]) for i in g] for g in groups]
        full = self.full_at * batches.steps_per_epoch * self.epochs
        return ModuleReplacing(model, predecessor, self.rate, round(full)), batches

    def kept(self, trained: nn.Module) -> nn.Module:
        return trained.student

    def describe(self) -> dict[str, Any]:
        return {"method": "theseus", "rate": self.rate, "full_at": self.full_at, "student": self.student,
                "teacher": self.source.get("run")}

    def derived_from(self) -> dict[str, Any]:
        return {"teacher": self.source}

    def compression(self) -> dict[str, Any]:
        return {"method": "theseus", "rate": self.rate, "full_at": self.full_at, "student": self.student}


__all__ = ["ModuleReplacing", "Theseus", "modules_of"]
