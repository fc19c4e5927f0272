"""The batch source and the prediction loop every task type shares.

Training: the batch of optimizer step ``(epoch, step)`` is a pure function of ``(seed, epoch,
step)``: the items (examples, or span QA's windows) are shuffled by ``default_rng([seed, epoch])``
and cut into ``ceil(N / batch_size)`` batches (the last one may be smaller), so a resumed
fine-tuning run continues with exactly the batch it would have seen.  Under DDP each rank keeps
its share of the global batch's rows.  A task type gives the item count and its ``collate``
(rows -> tensors); the source is a :class:`~ptmkit.train.step.BatchSource` for the Trainer.

Prediction: items are batched in order of length (a stable sort), which keeps padding, and CPU
time, low; the caller writes each batch's outputs back at the items' own positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

Collate = Callable[[np.ndarray], dict[str, torch.Tensor]]


class ShuffledBatches:
    """``n`` items -> training batches ``collate(rows)``, a pure function of ``(seed, epoch, step)``."""

    def __init__(self, n: int, collate: Collate, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.n, self.collate, self.batch_size, self.seed = n, collate, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.steps_per_epoch = math.ceil(n / batch_size)

    def rows(self, epoch: int, step: int) -> np.ndarray:
        """Item indices of global batch ``step`` of ``epoch``."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return order[step * self.batch_size : (step + 1) * self.batch_size]

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        return self.collate(np.array_split(self.rows(epoch, step), self.world_size)[self.rank])

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(())


def by_length(lengths: Any, batch_size: int, collate: Collate, device: Any) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """``(index[b], batch)`` over all items, shortest first, the batch on ``device``."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        yield index, {k: v.to(device) for k, v in collate(index).items()}


__all__ = ["Collate", "ShuffledBatches", "by_length"]
