"""LoRA (Hu et al. 2021): low-rank updates of chosen projections of a frozen encoder.

A projection ``h = W x`` (``W [d_out, d_in]``) becomes ``h = W x + (alpha / r) B A x`` with
``A [r, d_in]``, ``B [d_out, r]`` and ``r << min(d_in, d_out)``; only ``A`` and ``B`` train.
``A`` starts as the reference implementation initialises it (Kaiming-uniform, as ``nn.Linear``
does) and ``B`` at zero, so the model at step 0 computes exactly what the pre-trained one does.
Dropout (``lora_dropout``) acts on the input of ``A`` only.  Scaling by ``alpha / r`` keeps the
size of the update roughly independent of ``r``; the paper sets ``alpha`` to the first ``r`` it
tries and does not tune it, which is ptmkit's default (``alpha = r``: scale 1).

The adapted projections are chosen by name among :meth:`ptmkit.encoders.base.Encoder.projections`
(default ``q`` and ``v``, the paper's choice).  A fused ``qkv`` module gets an update on the query
and value blocks of its output only: its key block is untouched.  Updates attach through forward
hooks on the modules that compute the projections, so no encoder file changes to take them.

:func:`merge_lora` folds ``W[rows] += (alpha / r) B A`` into the encoder and removes the hooks:
the same function at the base model's cost.
"""

from __future__ import annotations

import fnmatch
import math

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.dropout import dropout
from ptmkit.nn.projections import Projection

DEFAULT_TARGETS = "q,v"


class LoraUpdate(nn.Module):
    """``x [..., d_in] -> (alpha / r) B A x [..., d_out]`` with ``A [r, d_in]``, ``B [d_out, r]``
    (zero at the start)."""

    def __init__(self, d_in: int, d_out: int, rank: int, scale: float) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, d_in))
        self.B = nn.Parameter(torch.zeros(d_out, rank))
        self.scale = scale
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # the reference implementation's (loralib) choice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.A), self.B) * self.scale

    def delta_weight(self) -> torch.Tensor:
        """``(alpha / r) B A``: ``[d_out, d_in]``, what merging adds to the projection's weight rows."""
        return (self.B @ self.A) * self.scale


class _LoraHook:
    """Forward hook of one ``nn.Linear``: adds each update to its block of output rows.

    A callable object rather than a closure, so that ``copy.deepcopy`` of a model maps the hook to
    the copied updates (a function would keep pointing at the original's)."""

    def __init__(self, updates: list[tuple[slice, LoraUpdate]], p: float) -> None:
        self.updates = sorted(updates, key=lambda u: u[0].start)
        self.p = p

    def __call__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
        first = self.updates[0][1]
        x = dropout(inputs[0], self.p, first.training)  # one mask for the module's input, as loralib's fused layer
        parts, at = [], 0
        for rows, update in self.updates:
            if rows.start > at:
                parts.append(out[..., at:rows.start])
            parts.append(out[..., rows] + update(x).to(out.dtype))
            at = rows.stop
        if at < out.shape[-1]:
            parts.append(out[..., at:])
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def parse_targets(targets: str) -> list[str]:
    """``"q,v"`` -> ``["q", "v"]``: comma-separated name patterns, none empty."""
    patterns = [t.strip() for t in str(targets).split(",")]
    if not patterns or any(not t for t in patterns):
        raise PtmError(f"lora_targets is a comma-separated list of projection names or patterns (q,v or "
                       f"layers.*.attn.q), got {targets!r}")
    return patterns


def matches(pattern: str, name: str) -> bool:
    """A pattern without a dot names the projection's last part (``q``, ``fc*``); one with dots is
    a glob over the whole name (``layers.1[01].attn.*``, ``decoder.*.cross_attn.v``)."""
    if "." in pattern:
        return fnmatch.fnmatchcase(name, pattern)
    return fnmatch.fnmatchcase(name.rsplit(".", 1)[-1], pattern)


def select(projections: dict[str, Projection], targets: str) -> list[str]:
    """The names of ``projections`` that the patterns ``targets`` choose (see :func:`matches`), in
    the encoder's order; a pattern that chooses nothing is refused, naming what there is."""
    chosen = []
    for pattern in parse_targets(targets):
        hit = [n for n in projections if matches(pattern, n)]
        if not hit:
            leaves = sorted({n.rsplit(".", 1)[-1] for n in projections})
            example = next(iter(projections), "layers.0.attn.q")
            raise PtmError(f"lora_targets pattern {pattern!r} names no projection of this encoder; the projections are "
                           f"{', '.join(leaves)} in every layer (full names like {example})")
        chosen.extend(n for n in hit if n not in chosen)
    return [n for n in projections if n in chosen]


class Lora(nn.Module):
    """The LoRA updates of one encoder: ``updates[name]`` per adapted projection (``.`` in the
    name written ``/``, as module names cannot hold dots), so its parameters are named
    ``updates.layers/0/attn/q.A``.  Register it on the task model so that it trains and saves."""

    def __init__(self, rank: int, alpha: float) -> None:
        super().__init__()
        self.rank = rank
        self.alpha = alpha
        self.updates = nn.ModuleDict()

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def names(self) -> list[str]:
        """The adapted projections' names (``layers.0.attn.q``)."""
        return [key.replace("/", ".") for key in self.updates]


def add_lora(encoder: nn.Module, rank: int, alpha: float | None = None, p: float = 0.0,
             targets: str = DEFAULT_TARGETS) -> Lora:
    """Attach rank-``rank`` updates to the projections of ``encoder`` that ``targets`` choose and
    return them (``alpha``: ``None`` = ``rank``; ``p``: dropout on the updates' input).  The
    encoder's own weights are left as they are; freezing them is the caller's choice."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise PtmError(f"lora_rank must be a positive integer, got {rank!r}")
    alpha = float(rank if alpha is None else alpha)
    projections = encoder.projections()
    lora = Lora(rank, alpha)
    by_module: dict[int, tuple[nn.Linear, list[tuple[slice, LoraUpdate]]]] = {}
    for name in select(projections, targets):
        proj = projections[name]
        if rank > min(proj.in_features, proj.out_features):
            raise PtmError(f"lora_rank={rank} exceeds the size of {name} ({proj.out_features} x {proj.in_features}): "
                           f"the rank is at most min(d_in, d_out)")
        update = LoraUpdate(proj.in_features, proj.out_features, rank, lora.scale)
        update.to(device=proj.linear.weight.device, dtype=proj.linear.weight.dtype)
        lora.updates[name.replace(".", "/")] = update
        by_module.setdefault(id(proj.linear), (proj.linear, []))[1].append((proj.rows, update))
    for linear, updates in by_module.values():
        linear.register_forward_hook(_LoraHook(updates, p))
    return lora


def _remove_hooks(encoder: nn.Module) -> None:
    for module in encoder.modules():
        for key, hook in list(module._forward_hooks.items()):
            if isinstance(hook, _LoraHook):
                del module._forward_hooks[key]


@torch.no_grad()
def merge_lora(encoder: nn.Module, lora: Lora) -> None:
    """Fold every update into the encoder's weights, ``W[rows] += (alpha / r) B A``, and detach the
    hooks: the encoder then computes what it computed with the updates (to float rounding), at
    the cost of the base model.  ``lora`` is spent afterwards (drop it from the task model)."""
    projections = encoder.projections()
    for name, update in zip(lora.names(), lora.updates.values()):
        if name not in projections:
            raise PtmError(f"the LoRA update of {name} has no projection of that name in this encoder")
        proj = projections[name]
        proj.linear.weight[proj.rows] += update.delta_weight().to(proj.linear.weight.dtype)
    _remove_hooks(encoder)


__all__ = ["DEFAULT_TARGETS", "Lora", "LoraUpdate", "add_lora", "matches", "merge_lora", "parse_targets", "select"]
