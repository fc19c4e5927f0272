"""What a fine-tuning run optimises, as a contract: plain fine-tuning trains the task model on its
own loss; distillation (:mod:`ptmkit.compress.distil`) and module replacing
(:mod:`ptmkit.compress.theseus`) train it inside a module that adds a teacher or a predecessor.

:func:`ptmkit.tasks.finetune.finetune` takes a :class:`Training` and does everything else as for
any fine-tuning (the Trainer, dev selection of the task model, checkpoints and exact resume,
``results.json`` and the saved task model).  A subclass overrides:

* ``wrap(model, task, encoded, batches, seed) -> (trained, batches)``: the module the Trainer
  optimises (its ``forward(batch)`` returns a ``StepOutput``) and the batch source it reads;
* ``kept(trained) -> model``: the task model inside it, the one scored on dev and saved;
* ``describe()``: the settings, recorded in the results and compared on ``--resume``;
* ``derived_from()`` / ``compression()``: what the saved model records about its origin.

A wrapper that keeps the task model's encoder as its attribute ``backbone`` (registered before the
task model) gets layer-wise learning rates and gradual unfreezing like the task model itself.
"""

from __future__ import annotations

from typing import Any

from torch import nn


class Training:
    """Plain fine-tuning: the task model trains on its own loss.  ``activity`` names it in the
    messages about its plan (too few optimizer steps)."""

    activity = "fine-tuning"

    def wrap(self, model: nn.Module, task: Any, encoded: dict[str, Any], batches: Any, seed: int) -> tuple[nn.Module, Any]:
        return model, batches

    def kept(self, trained: nn.Module) -> nn.Module:
        return trained

    def describe(self) -> dict[str, Any]:
        return {}

    def derived_from(self) -> dict[str, Any]:
        return {}

    def compression(self) -> dict[str, Any]:
        return {}


__all__ = ["Training"]
