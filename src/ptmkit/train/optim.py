"""Optimizers (AdamW, LAMB, Adafactor) with parameter groups, and learning-rate schedules.

Parameter groups follow BERT: no weight decay on biases and normalisation weights (every
parameter with fewer than two dimensions, and anything named ``*norm*``); weight matrices,
including embedding tables, are decayed.  Optional layer-wise LR decay (ELECTRA, Clark et al.
2020) scales the LR of layer ``i`` by ``layer_decay ** (L - i)``; the layers are the ones the
encoder declares (``Encoder.layer_index``), never guessed from parameter names.

``train.optimizer`` picks the optimizer; all three see the same parameter groups:

- ``adamw``: torch's AdamW, or with ``train.bias_correction=false`` :class:`AdamWNoBiasCorrection`:
  the same decoupled-weight-decay update without Adam's bias correction of the moments, as the
  reference implementations of BERT and ELECTRA (their ``AdamWeightDecayOptimizer``) train.
- ``lamb``: :class:`Lamb` (You et al. 2020), Adam's update plus decoupled weight decay, scaled per
  parameter tensor by the trust ratio ``||w|| / ||update||``.
- ``adafactor``: torch's ``Adafactor`` (Shazeer & Stern 2018), with ``train.adafactor_*`` settings.

Schedules are multipliers of the peak LR as a function of the number of completed optimizer
steps ``s`` (0 for the first step), used through :class:`torch.optim.lr_scheduler.LambdaLR`.
Warmup is linear: ``(s + 1) / warmup_steps`` so the very first step already trains.  ``wsd``
(warmup-stable-decay, Hu et al. 2024, MiniCPM) holds the peak after the warmup and decays over the
last ``D = round(decay_fraction * max_steps)`` steps (at least 1; never into the warmup): with
``p = (s - (max_steps - D)) / D``, the multiplier is ``floor + (1 - floor) * shape(p)``, ``shape``
``1 - p`` (linear), ``(1 + cos(pi p)) / 2`` (cosine) or ``1 - sqrt(p)``.  As with ``linear``, the
multiplier is 1 at the first decay step and reaches ``floor`` after the last step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.train.config import TrainConfig


def no_decay(name: str, param: torch.Tensor) -> bool:
    """True for biases and normalisation weights (vectors), which are not weight-decayed."""
    owner = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]  # the module holding the parameter
    return param.ndim < 2 or name.endswith(".bias") or "norm" in owner.lower()


def parameter_depths(model: nn.Module) -> tuple[dict[str, int], int]:
    """``({name: depth}, L)`` for every parameter of ``model``.

    The encoder (the model itself, or its ``backbone`` child) declares the depth of its own
    parameters: 0 embeddings, ``i + 1`` layer ``i``, ``L + 1`` on top.  Everything outside it
    (pre-training heads, an ELECTRA generator, a task head) is on top, ``L + 1``.
    """
    encoder, prefix = None, ""
    if isinstance(model, Encoder):
        encoder = model
    elif isinstance(getattr(model, "backbone", None), Encoder):
        encoder, prefix = model.backbone, "backbone."
    num_layers = encoder.num_layers if encoder is not None else 0
    depths = {}
    for name, _ in model.named_parameters():
        if encoder is not None and name.startswith(prefix):
            depths[name] = encoder.layer_index(name[len(prefix):])
        else:
            depths[name] = num_layers + 1
    return depths, num_layers


def param_groups(model: nn.Module, weight_decay: float, lr: float, layer_decay: float = 1.0) -> list[dict]:
    """Split ``model``'s trainable parameters into AdamW groups.

    Tied parameters appear once (``named_parameters`` de-duplicates them).  Each group carries
    ``lr`` (the peak LR times its layer factor) and ``weight_decay``.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    depths, num_layers = parameter_depths(model)
    groups: dict[tuple[bool, int], dict] = {}
    for name, param in named:
        decay = not no_decay(name, param)
        depth = depths[name] if layer_decay != 1.0 else num_layers + 1
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


class AdamWNoBiasCorrection(torch.optim.Optimizer):
    """AdamW without bias correction (Devlin et al. 2019's and Clark et al. 2020's optimizer).

    Per parameter ``p`` with gradient ``g``, at learning rate ``lr``::

        m <- b1 m + (1 - b1) g
        v <- b2 v + (1 - b2) g^2
        p <- p - lr (m / (sqrt(v) + eps) + weight_decay p)

    Without the ``1 / (1 - b^t)`` corrections the first steps are smaller (``m`` starts near 0
    and ``sqrt(v)`` near ``sqrt(1 - b2) |g|``), an implicit warm-up.  State per parameter:
    ``step``, ``exp_avg``, ``exp_avg_sq`` (torch's AdamW names), in float32 like the weights.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                g = p.grad
                m.lerp_(g, 1.0 - b1)
                v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
                if wd != 0:
                    p.mul_(1.0 - lr * wd)  # decoupled: the decay reads the weight before the update
                p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)
        return loss


def _whole_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of each tensor, stacked: of the whole tensor when it is sharded (FSDP's DTensor)."""
    norms = torch._foreach_norm(tensors)
    return torch.stack([n.full_tensor() if hasattr(n, "full_tensor") else n for n in norms])


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning", Algorithm 2).

    Per parameter tensor ``w`` with gradient ``g`` at step ``t``, at learning rate ``lr``::

        m <- b1 m + (1 - b1) g                   v <- b2 v + (1 - b2) g^2
        r <- m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay w
        w <- w - lr * (||w|| / ||r||) * r        (the ratio is 1 when either norm is 0)

    The trust ratio's scaling function is the identity.  A group with ``weight_decay`` 0 (biases
    and normalisation weights, :func:`param_groups`) still gets the trust ratio.  All tensors of
    a group are updated together (``torch._foreach_*``); the norms are of whole tensors, also when
    FSDP shards them.  State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (AdamW's names).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p]["step"] = torch.zeros((), dtype=torch.float32)
                    self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            self._update(group, params)
        return loss

    def _update(self, group: dict, params: list[torch.Tensor]) -> None:
        b1, b2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        states = [self.state[p] for p in params]
        grads = [p.grad for p in params]
        steps = [s["step"] for s in states]
        m = [s["exp_avg"] for s in states]
        v = [s["exp_avg_sq"] for s in states]
        torch._foreach_add_(steps, 1.0)
        torch._foreach_lerp_(m, grads, 1.0 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, value=1.0 - b2)
        t = torch.stack(steps).tolist()  # the step counters live on the CPU, as torch's AdamW's
        # r = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps) + wd * w
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, [math.sqrt(1.0 - b2**k) for k in t])
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(m, denom)
        torch._foreach_div_(update, [1.0 - b1**k for k in t])
        if wd != 0:
            torch._foreach_add_(update, params, alpha=wd)
        w_norm, r_norm = _whole_norms(params), _whole_norms(update)
        ratio = torch.where((w_norm > 0) & (r_norm > 0), w_norm / r_norm, 1.0)
        torch._foreach_mul_(update, list(ratio.unbind()))
        torch._foreach_add_(params, update, alpha=-lr)


def _adamw(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    if not cfg.bias_correction:
        return AdamWNoBiasCorrection(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)
    params = [p for g in groups for p in g["params"]]
    # torch's fused kernel: one pass per tensor instead of a dozen elementwise ops (a 5M-parameter
    # model's step 14.6 -> 2.0 ms on a 2-core CPU); it needs float tensors on CPU or CUDA
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay,
                             fused=fused or None)


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``cfg.optimizer`` over :func:`param_groups` of ``model``."""
    groups = param_groups(model, cfg.weight_decay, cfg.lr, cfg.layer_decay)
    for g in groups:
        g.pop("names")
    if cfg.optimizer == "lamb":
        return Lamb(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adafactor":
        return torch.optim.Adafactor(groups, lr=cfg.lr, beta2_decay=cfg.adafactor_beta2_decay,
                                     eps=(cfg.adafactor_eps1, cfg.adafactor_eps2), weight_decay=cfg.weight_decay)
    return _adamw(groups, cfg)


@dataclass
class Schedule:
    """LR multiplier ``f(s)`` for ``s`` completed steps (picklable, so ``LambdaLR`` can save it)."""

    kind: str
    warmup_steps: int
    max_steps: int
    min_lr_ratio: float = 0.0
    cut_frac: float = 0.1
    ratio: float = 32.0
    decay_fraction: float = 0.1
    decay_shape: str = "linear"

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
        if self.kind == "wsd":
            start = max(w, total - max(1, round(self.decay_fraction * total)))
            if s < start:
                return 1.0
            return floor + (1.0 - floor) * _decay(self.decay_shape, min(1.0, (s - start) / max(1, total - start)))
        progress = min(1.0, (s - w) / max(1, total - w))
        if self.kind == "linear":
            return floor + (1.0 - floor) * (1.0 - progress)
        if self.kind == "cosine":
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        raise ValueError(f"unknown schedule {self.kind!r}")


def _decay(shape: str, p: float) -> float:
    """The share of the peak left at progress ``p`` in [0, 1] of a decay."""
    if shape == "linear":
        return 1.0 - p
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    if shape == "sqrt":
        return 1.0 - math.sqrt(p)
    raise ValueError(f"unknown decay shape {shape!r}")


def build_schedule(cfg: TrainConfig) -> Schedule:
    return Schedule(cfg.schedule, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio, cfg.stlr_cut_frac, cfg.stlr_ratio,
                    cfg.decay_fraction, cfg.decay_shape)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, build_schedule(cfg))
