"""Parameter-efficient fine-tuning on a task model: LoRA (:mod:`ptmkit.nn.lora`) or BitFit
(:mod:`ptmkit.nn.bitfit`) chosen by the fine-tuning settings, and what of such a model is saved.

The encoder's own weights stay those of the pre-trained model (the *base*), so a task needs only
its small weights kept: the LoRA updates or the bias terms, and the task head.  The saved task
model records the base by path and by the SHA-256 of its encoder's weights
(:func:`ptmkit.train.checkpoint.tensors_sha256`), and loads only on that base (:mod:`ptmkit.tasks.saved`).
With ``lora_merge`` the updates are folded into the weights before saving and the whole model is
saved instead.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ptmkit.nn.bitfit import freeze_for_bitfit
from ptmkit.nn.lora import DEFAULT_TARGETS, add_lora, merge_lora
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.train.checkpoint import CONFIG_FILE, tensors_sha256


def method(cfg: FinetuneConfig) -> str | None:
    """``"lora"``, ``"bitfit"`` or ``None`` (every weight trains, or adapters do)."""
    return "lora" if cfg.lora_rank else "bitfit" if cfg.bitfit else None


def make_efficient(model: nn.Module, encoder: nn.Module, cfg: FinetuneConfig) -> None:
    """Set ``model`` (a task model, ``encoder`` inside it) up for its method: LoRA updates attached
    (registered as ``model.lora``) and the encoder frozen, or the encoder frozen but its bias terms.
    The task head is left trainable.  Nothing happens without a method."""
    if cfg.lora_rank:
        model.lora = add_lora(encoder, cfg.lora_rank, cfg.lora_alpha, float(cfg.lora_dropout), cfg.lora_targets)
        encoder.requires_grad_(False)
    elif cfg.bitfit:
        freeze_for_bitfit(encoder)


def merge(model: nn.Module, encoder: nn.Module) -> None:
    """Fold ``model``'s LoRA updates into ``encoder`` and drop them: the same outputs (to float
    rounding) from a plain model."""
    merge_lora(encoder, model.lora)
    del model.lora


def is_merged(model: nn.Module, cfg: FinetuneConfig) -> bool:
    """Whether a LoRA model's updates have been folded into its weights (it holds them no more)."""
    return bool(cfg.lora_rank) and getattr(model, "lora", None) is None


def small_names(model: nn.Module, encoder: nn.Module) -> set[str]:
    """The state names of ``model`` that a parameter-efficient save keeps: everything outside the
    encoder (LoRA updates, the head, its buffers) and the encoder's trainable parameters (BitFit's
    biases).  A head tensor that is an encoder tensor (a tied output layer) comes from the base."""
    inside = {id(t) for t in encoder.parameters()} | {id(t) for t in encoder.buffers()}
    names = {n for n, p in model.named_parameters(remove_duplicate=False) if id(p) not in inside or p.requires_grad}
    return names | {n for n, b in model.named_buffers(remove_duplicate=False) if id(b) not in inside}


def small_state(model: nn.Module, encoder: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (``model``'s state dict) cut to :func:`small_names`."""
    keep = small_names(model, encoder)
    return {k: v for k, v in state.items() if k in keep}


def without_method(cfg: FinetuneConfig) -> FinetuneConfig:
    """``cfg`` with LoRA and BitFit off (their settings at the defaults): what a model trained
    from this one's weights starts from, such as a distilled student, which learns every weight."""
    return replace(cfg, lora_rank=0, lora_alpha=None, lora_dropout=0.0, lora_targets=DEFAULT_TARGETS, lora_merge=False,
                   bitfit=False)


def base_record(pretrained: Any, init: str) -> dict[str, str] | None:
    """``{"path", "sha256"}`` of the pre-trained checkpoint ``pretrained`` was loaded from, for a
    save of the small weights only; ``None`` where no checkpoint rebuilds the base (a fresh
    initialisation, a model built in Python, an encoder taken from an earlier fine-tuning):
    then the whole model is saved."""
    path = getattr(pretrained, "path", None)
    if init != "pretrained" or path is None or not (Path(path) / CONFIG_FILE).is_file():
        return None
    return {"path": str(Path(path).resolve()), "sha256": tensors_sha256(pretrained.backbone.state_dict())}


__all__ = ["base_record", "is_merged", "make_efficient", "merge", "method", "small_names", "small_state",
           "without_method"]
