"""Fine-tuning decisions as Trainer callbacks: dev-based model selection and staged freezing.

Both keep their state in the Trainer's checkpoints (``TrainerCallback.state_dict``), so a
fine-tuning run killed mid-way and resumed makes the same decisions as an uninterrupted one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_bytes
from ptmkit.train.trainer import TrainerCallback

BEST_FILE = "best.safetensors"


class DevSelection(TrainerCallback):
    """At the end of every epoch: score the dev split, log it (split ``dev`` in ``metrics.jsonl``)
    and keep the weights of the epoch with the best ``select`` metric (``loss`` is minimised).

    evaluate: ``model -> dict of dev metrics``.  The best weights go to ``out_dir/best.safetensors``
    (written atomically, so they survive a kill) or stay in memory when there is no ``out_dir``.
    kept: the module inside the trained one whose weights are kept (a distilled student inside
    the module that adds its teacher; :class:`ptmkit.tasks.training.Training`); default all of it.
    """

    def __init__(self, evaluate: Callable[[nn.Module], dict[str, float]], select: str, steps_per_epoch: int,
                 out_dir: Path | None, is_main: bool = True,
                 kept: Callable[[nn.Module], nn.Module] = lambda m: m) -> None:
        self.evaluate = evaluate
        self.kept = kept
        self.select = select
        self.steps_per_epoch = steps_per_epoch
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.is_main = is_main
        self.history: list[dict[str, Any]] = []
        self.best_value: float | None = None
        self.best_epoch = 0
        self._best_in_memory: dict[str, torch.Tensor] | None = None

    def better(self, value: float) -> bool:
        if self.best_value is None:
            return True
        return value < self.best_value if self.select == "loss" else value > self.best_value

    def on_step_end(self, trainer, step: int) -> None:
        if step % self.steps_per_epoch and step != trainer.cfg.max_steps:
            return
        epoch = math.ceil(step / self.steps_per_epoch)
        model = trainer.model
        dev = self.evaluate(model)
        model.train()
        train_loss = trainer.last_train.get("loss") if trainer.last_train.get("step") == step else None
        self.history.append({"epoch": epoch, "train_loss": train_loss, **{f"dev_{k}": v for k, v in dev.items()}})
        trainer.write_record({"step": step, "split": "dev", "epoch": epoch, **dev})
        if self.better(dev[self.select]):
            # weights holding NaN or inf are never kept: the run stops naming its last good checkpoint
            trainer.require_finite_weights(f"epoch {epoch}'s weights were not kept as the best")
            self.best_value, self.best_epoch = dev[self.select], epoch
            state = {k: v.detach().cpu().clone() for k, v in self.kept(model).state_dict().items()}
            if self.out_dir is None:
                self._best_in_memory = state
            elif self.is_main:
                _save_atomic(state, self.out_dir / BEST_FILE)

    def best_state(self) -> dict[str, torch.Tensor]:
        """The selected epoch's weights."""
        if self._best_in_memory is not None:
            return self._best_in_memory

        return load_file(str(self.out_dir / BEST_FILE))

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "best_value": self.best_value, "best_epoch": self.best_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", []))
        self.best_value = state.get("best_value")
        self.best_epoch = int(state.get("best_epoch", 0))


def _save_atomic(state: dict[str, torch.Tensor], path: Path) -> None:
    # shared tensors (tied weights) are stored per name; the classifier loads them back by name
    atomic_write_bytes(path, save({k: v.contiguous() for k, v in state.items()}))


class StagedFreezing(TrainerCallback):
    """Which depths train in each epoch (1-based), as the encoder declares them (``layer_index``):
    ``lowest(epoch)`` is the lowest trainable depth.  Gradual unfreezing (ULMFiT): epoch 1 trains
    the head only, each further epoch unfreezes the next layer down; frozen embeddings keep depth
    0 fixed throughout.  A frozen parameter gets no gradient, so AdamW leaves it (and its
    moments) untouched."""

    def __init__(self, depths: dict[str, int], lowest: Callable[[int], int], steps_per_epoch: int) -> None:
        self.depths = depths
        self.lowest = lowest
        self.steps_per_epoch = steps_per_epoch

    def apply(self, model: nn.Module, epoch: int) -> None:
        floor = self.lowest(epoch)
        for name, param in model.named_parameters():
            if name in self.depths:
                param.requires_grad_(self.depths[name] >= floor)

    def on_fit_start(self, trainer) -> None:
        if trainer.dist.world_size > 1:
            raise PtmError("gradual unfreezing and frozen embeddings are not supported under DDP; train on one process")
        self.apply(trainer.model, trainer.step // self.steps_per_epoch + 1)

    def on_step_end(self, trainer, step: int) -> None:
        if step % self.steps_per_epoch == 0:
            self.apply(trainer.model, step // self.steps_per_epoch + 1)


class AuxWeightDecay(TrainerCallback):
    """SiATL's auxiliary-loss schedule (Chronopoulou et al. 2019): the LM weight of epoch ``e``
    (1-based) is ``weight * decay ** (e - 1)``, so the task loss takes over as fine-tuning goes on.
    Set at the start of every epoch from the step alone, so a resumed run gets the same weights."""

    def __init__(self, weight: float, decay: float, steps_per_epoch: int) -> None:
        self.weight, self.decay, self.steps_per_epoch = weight, decay, steps_per_epoch

    def apply(self, model: nn.Module, epoch: int) -> None:
        model.aux_lm_weight = self.weight * self.decay ** (epoch - 1)

    def on_fit_start(self, trainer) -> None:
        self.apply(trainer.model, trainer.step // self.steps_per_epoch + 1)

    def on_step_end(self, trainer, step: int) -> None:
        if step % self.steps_per_epoch == 0:
            self.apply(trainer.model, step // self.steps_per_epoch + 1)
