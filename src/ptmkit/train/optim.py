"""AdamW with parameter groups, and learning-rate schedules.

Parameter groups follow BERT: no weight decay on biases and normalisation weights (every
parameter with fewer than two dimensions, and anything named ``*norm*``); weight matrices,
including embedding tables, are decayed.  Optional layer-wise LR decay (ELECTRA, Clark et al.
2020) scales the LR of ``layers.{i}`` by ``layer_decay ** (L - i)``.

Schedules are multipliers of the peak LR as a function of the number of completed optimizer
steps ``s`` (0 for the first step), used through :class:`torch.optim.lr_scheduler.LambdaLR`.
Warmup is linear: ``(s + 1) / warmup_steps`` so the very first step already trains.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.train.config import TrainConfig

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def no_decay(name: str, param: torch.Tensor) -> bool:
    """True for biases and normalisation weights (vectors), which are not weight-decayed."""
    owner = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]  # the module holding the parameter
    return param.ndim < 2 or name.endswith(".bias") or "norm" in owner.lower()


def layer_id(name: str, num_layers: int) -> int:
    """Depth of a parameter for layer-wise LR decay: embeddings 0, ``layers.i`` i+1, heads L+1."""
    match = _LAYER_RE.search(name)
    if match:
        return int(match.group(1)) + 1
    if "embeddings." in name:
        return 0
    return num_layers + 1


def param_groups(model: nn.Module, weight_decay: float, lr: float, layer_decay: float = 1.0) -> list[dict]:
    """Split ``model``'s trainable parameters into AdamW groups.

    Tied parameters appear once (``named_parameters`` de-duplicates them).  Each group carries
    ``lr`` (the peak LR times its layer factor) and ``weight_decay``.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    layers = [int(m.group(1)) for n, _ in named if (m := _LAYER_RE.search(n))]
    num_layers = max(layers) + 1 if layers else 0
    groups: dict[tuple[bool, int], dict] = {}
    for name, param in named:
        decay = not no_decay(name, param)
        depth = layer_id(name, num_layers) if layer_decay != 1.0 else num_layers + 1
        scale = layer_decay ** (num_layers + 1 - depth)
        key = (decay, depth)
        if key not in groups:
            groups[key] = {
                "params": [],
                "names": [],
                "weight_decay": weight_decay if decay else 0.0,
                "lr": lr * scale,
            }
        groups[key]["params"].append(param)
        groups[key]["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    groups = param_groups(model, cfg.weight_decay, cfg.lr, cfg.layer_decay)
    for g in groups:
        g.pop("names")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


@dataclass
class Schedule:
    """LR multiplier ``f(s)`` for ``s`` completed steps (picklable, so ``LambdaLR`` can save it)."""

    kind: str
    warmup_steps: int
    max_steps: int
    min_lr_ratio: float = 0.0
    cut_frac: float = 0.1
    ratio: float = 32.0

    def __call__(self, s: int) -> float:
        w, total, floor = self.warmup_steps, self.max_steps, self.min_lr_ratio
        if self.kind == "slanted_triangular":
            # Howard & Ruder (2018), eq. 3: cut = floor(T * cut_frac) unless a warmup is given.
            t = s + 1
            cut = w if w > 0 else max(1, math.floor(total * self.cut_frac))
            decay_len = cut * (1.0 / self.cut_frac - 1.0) if w == 0 else total - cut
            p = t / cut if t < cut else max(0.0, 1.0 - (t - cut) / max(1.0, decay_len))
            return (1.0 + p * (self.ratio - 1.0)) / self.ratio
        if w > 0 and s < w:
            return (s + 1) / w
        if self.kind == "constant":
            return 1.0
        if self.kind == "inverse_sqrt":
            # Vaswani et al. (2017): lr ~ 1/sqrt(step), continuous with the warmup at s = w.
            return math.sqrt(max(w, 1) / (s + 1))
        progress = min(1.0, (s - w) / max(1, total - w))
        if self.kind == "linear":
            return floor + (1.0 - floor) * (1.0 - progress)
        if self.kind == "cosine":
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        raise ValueError(f"unknown schedule {self.kind!r}")


def build_schedule(cfg: TrainConfig) -> Schedule:
    return Schedule(cfg.schedule, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio, cfg.stlr_cut_frac, cfg.stlr_ratio)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, build_schedule(cfg))
