"""Pruning a fine-tuned task model: attention heads (Michel et al. 2019), whole layers, and weights
by magnitude.

Heads.  Iterative pruning (Michel et al. §4.2 / §6, HF's ``run_bertology.py``): the heads are masked
in steps of a fixed fraction of *all* heads (10 %), each step taking the heads of lowest importance
among those left, with the importance re-estimated under the current mask
(:func:`ptmkit.compress.importance.head_importance`) — or, as the baseline, in a random order fixed
by a seed.  :func:`head_pruning_path` returns the mask and the caller's scores at every step; the
chosen mask is then cut out of the weights (:func:`prune_heads`, the encoder's ``prune_heads``),
which computes exactly what the mask computed.

Every head of a layer is never pruned: ptmkit refuses it, for a request (:func:`prune_heads`) as
for a step of the path (a step skips a layer's last head and takes the next one).  A layer without
heads still runs its feed-forward sub-layer on its attention's output bias, so removing its heads
is not removing the layer, and removing the layer is not what the mask measured; whole layers go
with :func:`keep_layers` (``ptm prune --method layers``).  At most ``L (H - 1)`` heads can go.

Layers.  :func:`keep_layers`: the encoder keeps the chosen layers, renumbered (Transformer encoder;
``TransformerEncoder.keep_layers``), and a task head that mixes layers (ELMo's scalar mix, one
chosen layer) keeps its weights of those layers.

Weights.  :func:`magnitude_prune`: global unstructured L1 pruning (``torch.nn.utils.prune``) over
the weight matrices of every ``nn.Linear`` of the encoder, the smallest ``|w|`` of all of them set
to 0, made permanent (``prune.remove``) so the state dict holds plain zeros.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn
from torch.nn.utils import prune as torch_prune

from ptmkit.compress.importance import head_importance, head_shape, pruned_mask
from ptmkit.encoders.transformer import check_kept_layers
from ptmkit.errors import PtmError
from ptmkit.nn.layer_mix import LAYER_PREFIX, ChosenLayer
from ptmkit.nn.scalar_mix import ScalarMix
from ptmkit.tasks.saved import encoder_of

STEP = 0.1  # Michel et al.'s step: 10 % of all heads per iteration
ORDERS = ("importance", "random")


def check_fraction(fraction: Any, what: str = "fraction") -> float:
    """A fraction in ``[0, 1)``; :class:`PtmError` otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0 \
            or math.isnan(fraction):
        raise PtmError(f"{what} must be in [0, 1) (the share of heads or weights removed; 0.3 = 30 %), got {fraction!r}")
    return float(fraction)


def heads_of(mask: torch.Tensor) -> dict[int, list[int]]:
    """``{layer: [head, ...]}`` of the zeros of a mask ``[layers, heads]``."""
    out: dict[int, list[int]] = {}
    for layer, head in (mask == 0).nonzero().tolist():
        out.setdefault(layer, []).append(head)
    return out


def masked_count(mask: torch.Tensor) -> int:
    return int((mask == 0).sum())


def most_prunable(num_layers: int, num_heads: int) -> int:
    """Heads that can go when every layer keeps one: ``L (H - 1)``."""
    return num_layers * (num_heads - 1)


def heads_for(fraction: float, num_layers: int, num_heads: int) -> int:
    """The number of heads a fraction of all ``L H`` heads means (rounded to the nearest)."""
    return int(round(fraction * num_layers * num_heads))


def fractions_to(fraction: float, step: float = STEP) -> list[float]:
    """``0, step, 2 step, ...`` below ``fraction``, then ``fraction``: the steps of a path."""
    grid = [round(k * step, 10) for k in range(int(fraction / step + 1e-9) + 1) if k * step < fraction - 1e-9]
    return grid + [fraction] if fraction > 0 else [0.0]


def check_keeps_a_head(heads: Mapping[int, Sequence[int]], already: torch.Tensor) -> None:
    """:class:`PtmError` when ``heads`` together with the heads already pruned (``already``, a
    ``[layers, heads]`` mask with 0 for them) would leave a layer without heads."""
    L, H = already.shape
    left = already.clone()
    for layer, hs in heads.items():
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < L:
            raise PtmError(f"prune heads: layer {layer!r} does not exist; layers are numbered 0 .. {L - 1}")
        for h in hs:
            if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < H:
                raise PtmError(f"prune heads: layer {layer} has no head {h!r}; heads are numbered 0 .. {H - 1}")
        left[layer, list(hs)] = 0.0
    empty = [i for i in range(L) if not left[i].any()]
    if empty:
        raise PtmError(
            f"pruning every head of layer {empty[0]} is refused: each layer keeps at least one head; to drop whole "
            f"layers use --method layers --keep-layers (e.g. every layer but {empty[0]})"
        )


def prune_heads(model: nn.Module, heads: Mapping[int, Sequence[int]]) -> None:
    """Remove ``heads`` (``{layer: [head, ...]}``, original head numbers) from the weights of the task
    model's encoder; refused if a layer would be left without heads."""
    backbone = encoder_of(model)
    check_keeps_a_head(heads, pruned_mask(backbone))
    backbone.prune_heads({layer: list(hs) for layer, hs in heads.items() if hs})


def mask_more(mask: torch.Tensor, n: int, scores: torch.Tensor) -> torch.Tensor:
    """``mask`` with ``n`` more heads set to 0: those of lowest ``scores`` among the heads left,
    skipping a head that is the last of its layer.  :class:`PtmError` if fewer than ``n`` can go."""
    out = mask.clone()
    left = out.sum(dim=1)  # heads left per layer
    order = torch.argsort(scores.flatten().double(), stable=True).tolist()
    H = mask.shape[1]
    taken = 0
    for index in order:
        if taken == n:
            break
        layer, head = divmod(index, H)
        if out[layer, head] == 0 or left[layer] <= 1:
            continue
        out[layer, head] = 0.0
        left[layer] -= 1
        taken += 1
    if taken < n:
        L = mask.shape[0]
        raise PtmError(f"cannot prune {masked_count(mask) + n} of {L * H} heads: every layer keeps one head, so at most "
                       f"{most_prunable(L, H)} ({most_prunable(L, H) / (L * H):.3f} of them) can go")
    return out


def head_pruning_path(model: nn.Module, fractions: Sequence[float], order: str = "importance",
                      batches: Sequence[dict[str, Any]] = (), seed: int = 0,
                      score: Callable[[torch.Tensor], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Mask heads step by step up to each fraction of ``fractions`` (increasing; of all ``L H`` heads,
    the heads already pruned from the weights included), nothing removed from the weights.

    order: ``importance`` (before every step the importance is estimated on ``batches`` under the
    mask so far, and the least important heads go) or ``random`` (one order drawn from ``seed``).
    score: called with each step's mask ``[layers, heads]`` (e.g. the dev and test metrics under it).
    Returns per step ``{"fraction", "heads_masked", "heads": {layer: [head, ...]}, **score(mask)}``."""
    if order not in ORDERS:
        raise PtmError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    backbone = encoder_of(model)
    L, H = head_shape(backbone)
    mask = pruned_mask(backbone)
    scores = torch.rand(L, H, generator=torch.Generator().manual_seed(seed)) if order == "random" else None
    path = []
    for fraction in fractions:
        need = heads_for(check_fraction(fraction), L, H) - masked_count(mask)
        if need > 0:
            if order == "importance":
                scores = head_importance(model, batches, mask)
            mask = mask_more(mask, need, scores)
        step = {"fraction": float(fraction), "heads_masked": masked_count(mask),
                "heads": {str(k): v for k, v in heads_of(mask).items()}}
        path.append({**step, **(score(mask) if score is not None else {})})
    return path


def prunable_within(path: Sequence[dict[str, Any]], value: Callable[[dict[str, Any]], float], base: float,
                    tolerance: float, lower_is_better: bool = False) -> float:
    """The largest fraction of ``path`` whose ``value(step)`` lies within ``tolerance`` of ``base``
    (not worse by more than it; ``lower_is_better`` for a loss)."""
    ok = [s["fraction"] for s in path
          if (value(s) <= base + tolerance if lower_is_better else value(s) >= base - tolerance)]
    return max(ok, default=0.0)


# ------------------------------------------------------------------------------------------ layers


def keep_layers(model: nn.Module, layers: Sequence[int], mix: str) -> str:
    """Keep only the encoder layers ``layers`` (increasing), renumbered from 0, in the task model
    ``model``; a scalar mix keeps the weights of the embeddings and those layers, a chosen layer
    (``mix="layer:k"``) is renumbered (refused if its layer goes).  Returns the new ``mix`` setting."""
    backbone = encoder_of(model)
    if not callable(getattr(backbone, "keep_layers", None)):
        raise PtmError(f"--keep-layers cuts layers out of a transformer encoder; this model's encoder is "
                       f"{getattr(backbone, 'name', type(backbone).__name__)!r}")
    layers = check_kept_layers(layers, backbone.num_layers)
    states = [0] + [i + 1 for i in layers]  # the hidden states that remain: embeddings, then the kept layers
    num_states = backbone.num_layers + 1
    chosen = [m for m in model.modules() if isinstance(m, ChosenLayer) and m.num_states == num_states]
    for m in chosen:
        if m.index not in states:
            raise PtmError(f"the task head reads hidden state {m.index} alone (mix=layer:{m.index}: the output of layer "
                           f"{m.index - 1}), which --keep-layers {','.join(map(str, layers))} removes; keep that layer")
    backbone.keep_layers(layers)
    for m in model.modules():
        if isinstance(m, ScalarMix) and m.weights.numel() == num_states:
            m.weights = nn.Parameter(m.weights.detach()[states].clone(), m.weights.requires_grad)
    for m in chosen:
        m.index, m.num_states = states.index(m.index), len(states)
    return f"{LAYER_PREFIX}{chosen[0].index}" if chosen else mix


# ----------------------------------------------------------------------------------------- weights


def linear_weights(module: nn.Module) -> list[tuple[nn.Module, str]]:
    """``(linear, "weight")`` for every ``nn.Linear`` in ``module`` (a shared one once)."""
    return [(m, "weight") for m in module.modules() if isinstance(m, nn.Linear)]


def sparsity(module: nn.Module) -> dict[str, Any]:
    """Zeros among the ``nn.Linear`` weights of ``module``: ``{"weights", "zeros", "sparsity"}``."""
    n = sum(m.weight.numel() for m, _ in linear_weights(module))
    z = sum(int((m.weight == 0).sum()) for m, _ in linear_weights(module))
    return {"weights": n, "zeros": z, "sparsity": z / n if n else 0.0}


def magnitude_prune(model: nn.Module, amount: float) -> dict[str, Any]:
    """Global unstructured L1 pruning: the ``amount`` (a fraction in ``[0, 1)``) of the encoder's
    ``nn.Linear`` weights smallest in ``|w|``, pooled over all of them, set to 0 for good
    (``prune.global_unstructured`` then ``prune.remove``).  Biases, embeddings and norms stay.
    Returns the encoder's :func:`sparsity` afterwards."""
    check_fraction(amount, "sparsity")
    backbone = encoder_of(model)
    params = linear_weights(backbone)
    if not params:
        raise PtmError(f"the {getattr(backbone, 'name', 'given')} encoder has no linear layers to prune")
    if amount > 0:
        torch_prune.global_unstructured(params, pruning_method=torch_prune.L1Unstructured, amount=float(amount))
        for m, name in params:
            torch_prune.remove(m, name)  # weight = weight_orig * mask, a plain parameter again
    return sparsity(backbone)


def with_mix(cfg: Any, mix: str) -> Any:
    """``cfg`` (a FinetuneConfig) with its ``mix`` setting replaced (after :func:`keep_layers`)."""
    return cfg if cfg.mix == mix else dataclasses.replace(cfg, mix=mix)


__all__ = ["ORDERS", "STEP", "check_fraction", "check_keeps_a_head", "fractions_to", "head_pruning_path", "heads_for",
           "heads_of", "keep_layers", "linear_weights", "magnitude_prune", "mask_more", "most_prunable", "prunable_within",
           "prune_heads", "sparsity", "with_mix"]
