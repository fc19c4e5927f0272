"""How one optimizer step runs on the processes at hand: data parallelism (DDP or FSDP),
activation checkpointing, ``torch.compile`` and fp16 loss scaling, behind one small interface.

The :class:`~ptmkit.train.trainer.Trainer` keeps one explicit loop; what differs between a
laptop, two CPU processes under ``torchrun`` and a GPU node lives here:

- :meth:`Strategy.prepare` changes the model in place before the optimizer is built (FSDP
  replaces parameters by their shards, so the optimizer must see the shards);
- :meth:`Strategy.wrap` gives the module the forward pass runs through (DDP, compiled);
- :meth:`Strategy.sync` says whether this micro-batch's backward reduces gradients over ranks;
- :meth:`Strategy.backward` and :meth:`Strategy.step` apply the fp16 loss scale.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.train import distributed as dist
from ptmkit.train import sharding
from ptmkit.train.config import TrainConfig
from ptmkit.train.precision import check_precision, grad_scaler

log = logging.getLogger(__name__)


class Strategy:
    """The parallel and numeric set-up of one training run (``train.strategy``, ``train.precision``,
    ``train.activation_checkpointing``, ``train.compile``)."""

    def __init__(self, cfg: TrainConfig, device: torch.device, info: dist.DistInfo) -> None:
        check_precision(cfg.precision, device)
        self.cfg = cfg
        self.device = device
        self.fsdp = cfg.strategy == "fsdp"
        # FSDP without torchrun has no process group to shard over: train as usual, keep the
        # sharded checkpoint format (so a run started on one process resumes on many and back).
        # Under torchrun it shards, over a group of one if need be (one GPU).
        self.sharded = self.fsdp and torch.distributed.is_initialized()
        self.scaler = grad_scaler(cfg.precision, device)
        if self.fsdp and not self.sharded:
            log.warning("train.strategy=fsdp in one process: unsharded (`torchrun --nproc_per_node N` shards); "
                        "checkpoints are written in the sharded format")
        if self.sharded and self.scaler is not None:
            raise PtmError("train.precision=fp16 is not supported with train.strategy=fsdp (the loss scaler would "
                           "see one shard of the gradients); use train.precision=bf16, which needs no scaler")

    def prepare(self, model: nn.Module) -> nn.Module:
        """Activation checkpointing, then FSDP sharding (in place, before the optimizer is built)."""
        if self.cfg.activation_checkpointing:
            n = sharding.checkpoint_activations(model)
            log.info("activation checkpointing: %d blocks recompute their activations in the backward pass", n)
        if self.sharded:
            mp = torch.bfloat16 if self.cfg.fsdp_mixed_precision else None
            sharding.shard(model, self.device, offload=self.cfg.fsdp_offload, mixed_precision=mp)
        return model

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the training forward runs through: DDP around ``model`` when distributed
        without FSDP (FSDP is already in place), ``model`` itself otherwise."""
        return model if self.sharded else dist.wrap(model, self.device)

    def compiled(self, forward_model: nn.Module) -> nn.Module:
        """``torch.compile`` of the training module when ``train.compile`` (saving and evaluation
        keep using the plain module, so the weights' names do not change)."""
        return torch.compile(forward_model) if self.cfg.compile else forward_model

    def sync(self, forward_model: nn.Module, model: nn.Module, last: bool) -> contextlib.AbstractContextManager:
        """The context of one micro-batch's backward: gradients are reduced on the last only."""
        if self.sharded:
            sharding.set_gradient_sync(model, last)
            return contextlib.nullcontext()
        if not last and forward_model is not model and hasattr(forward_model, "no_sync"):
            return forward_model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale before they are clipped (fp16)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step the optimizer; ``False`` when the fp16 scaler skipped it (its gradients overflowed)."""
        if self.scaler is None:
            optimizer.step()
            return True
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= before

    def skip(self) -> None:
        """A step the non-finite guard skipped: the scaler still lowers its scale (fp16)."""
        if self.scaler is not None:
            self.scaler.update()

    def grad_norm(self, model: nn.Module) -> float:
        """Clip the gradients to ``train.clip_norm`` (0: no clipping); return their total norm."""
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        return float(sharding.local_value(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
