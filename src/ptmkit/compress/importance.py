"""Head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?", §4.1) of any
task model whose encoder has attention heads.

Every head ``h`` gets a gate ``ξ_h`` on its attention (HF's ``head_mask``, :mod:`ptmkit.nn.heads`);
at ``ξ = 1`` the model is unchanged and the importance of a head is the sensitivity of the task loss
to it, ``I_h = E |∂L/∂ξ_h|``.  As in the authors' code (HF's ``run_bertology.py``) the expectation is
taken over mini-batches: ``I_h = (1/N_b) Σ_b |∂L_b/∂ξ_h|`` with ``L_b`` the batch's mean task loss
(the model in eval mode: no dropout); then each layer's scores are divided by their L2 norm
(Michel et al. / run_bertology's per-layer normalisation, which makes layers comparable), and
optionally all of them rescaled to ``[0, 1]`` (global normalisation).

The gates reach the encoder without any change to the task models: a forward pre-hook on the
encoder (:func:`head_mask_injected`) adds ``head_mask`` to the keyword arguments of every call the
task model makes.  The loss is the task model's own (``model(batch).loss``) on labelled batches of
any split (:func:`split_batches`: the dev split by default in :mod:`ptmkit.compress.pruning`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.heads import no_heads_error
from ptmkit.tasks.saved import encoder_of


def head_shape(backbone: nn.Module) -> tuple[int, int]:
    """``(layers, heads)`` of the head mask ``backbone.forward`` takes (an encoder–decoder: its
    encoder's); :class:`PtmError` for an encoder without attention heads."""
    cfg = getattr(backbone, "config", None)
    layers = getattr(cfg, "encoder_layers", None) or getattr(cfg, "num_layers", None)
    heads = getattr(cfg, "num_heads", None)
    if not layers or not heads:
        raise no_heads_error(getattr(backbone, "name", type(backbone).__name__))
    return int(layers), int(heads)


def pruned_mask(backbone: nn.Module) -> torch.Tensor:
    """``[layers, heads]``: 0 for the heads ``prune_heads`` already removed (the config's
    ``pruned_heads``; an encoder–decoder's ``"encoder.i"`` keys), 1 for the others."""
    L, H = head_shape(backbone)
    mask = torch.ones(L, H)
    for key, heads in (getattr(backbone.config, "pruned_heads", None) or {}).items():
        name = str(key).removeprefix("encoder.")
        if name.isdigit():  # decoder and cross-attention heads are not the encoder's head mask
            mask[int(name), list(heads)] = 0.0
    return mask


@contextlib.contextmanager
def head_mask_injected(backbone: nn.Module, mask: torch.Tensor) -> Iterator[None]:
    """While open, every call of ``backbone`` gets ``head_mask=mask`` (``[layers, heads]``; times the
    caller's own head mask when it passes one), through a forward pre-hook with keyword arguments:
    the task model calls its encoder as it always does."""

    def inject(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        given = kwargs.get("head_mask")
        return args, {**kwargs, "head_mask": mask if given is None else mask * given}

    handle = backbone.register_forward_pre_hook(inject, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _unfrozen(model: nn.Module) -> Iterator[None]:
    """Feature-based task models (``mode=features``) run their fixed encoder without autograd; the
    gradient with respect to the gates needs it, so ``frozen`` is lifted meanwhile (the weights'
    ``requires_grad`` stay as they are: nothing but the gates is differentiated)."""
    frozen = [m for m in model.modules() if getattr(m, "frozen", None) is True]
    for m in frozen:
        m.frozen = False
    try:
        yield
    finally:
        for m in frozen:
            m.frozen = True


def on_split(task: Any, split: str, batch_size: int | None = None) -> Any:
    """A shallow copy of the task type whose *training* split is ``split``: its ``encode("train")``
    and ``batches`` then give ``split``'s labelled batches (a classification task's batches read the
    labels of ``data.train``).  A multi-task type's parts each read their own ``split``.
    ``batch_size`` replaces the fine-tuning batch size."""
    view = copy.copy(task)
    if batch_size is not None:
        view.cfg = dataclasses.replace(task.cfg, batch_size=int(batch_size))
    parts = getattr(task, "parts", None)
    if isinstance(parts, dict):
        view.parts = {name: on_split(p, split, batch_size) for name, p in parts.items()}
        view.data = dataclasses.replace(task.data, tasks={name: p.data for name, p in view.parts.items()})
        return view
    view.data = dataclasses.replace(task.data, train=task.data.split(split))
    return view


def split_batches(task: Any, split: str = "dev", batch_size: int | None = None) -> list[dict[str, Any]]:
    """Every example of ``split`` once, as the task type's labelled training batches (of
    ``batch_size``, default the fine-tuning batch size), in a fixed order."""
    view = on_split(task, split, batch_size)
    source = view.batches(view.encode("train"), 0)
    return [source(0, step) for step in range(int(source.steps_per_epoch))]


def _to(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def head_importance(model: nn.Module, batches: Sequence[dict[str, Any]], mask: torch.Tensor | None = None,
                    normalize_layers: bool = True, normalize_global: bool = False) -> torch.Tensor:
    """Michel et al.'s head importance ``[layers, heads]`` (float64) of the task model ``model``
    over ``batches`` (labelled batches of its task type, e.g. :func:`split_batches`).

    mask: the gates ``[layers, heads]`` the gradient is taken at (default all ones; iterative
    pruning passes the heads masked so far as 0, as Michel et al. re-estimate importance after
    each step).  normalize_layers: divide each layer's scores by their L2 norm (default, as the
    paper's code); normalize_global: then rescale all scores to ``[0, 1]``.  Heads already pruned
    from the weights score 0.  The model is run in eval mode and left in the mode it was in;
    its weights receive no gradient."""
    backbone = encoder_of(model)
    L, H = head_shape(backbone)
    if not batches:
        raise PtmError("head importance needs at least one labelled batch; the split is empty")
    param = next(backbone.parameters())
    gates = (torch.ones(L, H) if mask is None else mask.detach().clone()).to(param.device, param.dtype)
    if tuple(gates.shape) != (L, H):
        raise PtmError(f"the head mask has shape {list(gates.shape)}; this encoder's is [{L}, {H}] (layers, heads)")
    gates.requires_grad_(True)
    total = torch.zeros(L, H, dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with head_mask_injected(backbone, gates), _unfrozen(model), torch.enable_grad():
            for batch in batches:
                loss = model(_to(batch, param.device)).loss
                (grad,) = torch.autograd.grad(loss, gates, allow_unused=True)
                if grad is None:
                    raise PtmError(f"the loss of this {type(model).__name__} does not depend on the encoder's head mask; "
                                   f"head importance needs a task model that runs its encoder with attention heads")
                total += grad.detach().abs().double().cpu()
    finally:
        model.train(was_training)
    total /= len(batches)
    total *= pruned_mask(backbone).double()  # removed heads have no importance (their gates are ignored anyway)
    if normalize_layers:
        total = total / (total.norm(dim=1, keepdim=True) + 1e-20)
    if normalize_global:
        total = (total - total.min()) / (total.max() - total.min()).clamp_min(1e-20)
    return total


__all__ = ["head_importance", "head_mask_injected", "head_shape", "on_split", "pruned_mask", "split_batches"]
