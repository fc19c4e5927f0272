"""State the Trainer carries from step to step and saves in every checkpoint: the random
generators' states (so a resumed run draws what the uninterrupted run would) and the running
sums of one logging window; and how a batch is cut into micro-batches and moved to the device."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from ptmkit.errors import PtmError
from ptmkit.train import distributed as dist
from ptmkit.train.step import StepOutput


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def split_batch(batch: dict[str, Any], parts: int) -> list[dict[str, Any]]:
    """Split every tensor along dim 0 into ``parts`` micro-batches (other values are shared)."""
    if parts == 1:
        return [batch]
    rows = next((v.shape[0] for v in batch.values() if isinstance(v, torch.Tensor) and v.ndim > 0), None)
    if rows is None or rows < parts:
        raise PtmError(f"a batch of {rows} rows cannot be split into train.grad_accum={parts} micro-batches")
    pieces = {k: torch.tensor_split(v, parts, dim=0) for k, v in batch.items() if isinstance(v, torch.Tensor) and v.ndim > 0}
    return [{k: (pieces[k][i] if k in pieces else v) for k, v in batch.items()} for i in range(parts)]


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


class Window:
    """Running sums of one logging window (token-weighted loss and metrics, tokens, grad norms)."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.weight = 0.0
        self.metrics: dict[str, float] = {}
        self.tokens = 0.0
        self.steps = 0
        self.skipped = 0
        self.overflow = 0  # fp16 steps the loss scaler skipped
        self.grad_norm = 0.0

    def add(self, out: StepOutput, loss: float) -> None:
        w = float(out.n_predictions) if out.n_predictions and out.n_predictions > 0 else 1.0
        self.loss += loss * w
        self.weight += w
        for k, v in out.metrics.items():
            self.metrics[k] = self.metrics.get(k, 0.0) + float(v.detach()) * w
        self.tokens += float(out.n_tokens)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def reduce(self, device: torch.device) -> None:
        """Sum the window over ranks (every rank must call this)."""
        if not dist.is_distributed():
            return
        keys = sorted(self.metrics)
        t = torch.tensor([self.loss, self.weight, self.tokens, *[self.metrics[k] for k in keys]], dtype=torch.float64)
        t = dist.all_reduce_sum(t.to(device) if device.type == "cuda" else t).cpu()  # NCCL reduces CUDA tensors
        self.loss, self.weight, self.tokens = float(t[0]), float(t[1]), float(t[2])
        self.metrics = {k: float(t[3 + i]) for i, k in enumerate(keys)}
