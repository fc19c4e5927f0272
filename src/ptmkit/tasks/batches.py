"""Labelled examples as a :class:`~ptmkit.train.step.BatchSource` for the shared Trainer.

The batch of optimizer step ``(epoch, step)`` is a pure function of ``(seed, epoch, step)``: the
examples are shuffled by ``default_rng([seed, epoch])`` and cut into ``ceil(N / batch_size)``
batches (the last one may be smaller), so a resumed fine-tuning run continues with exactly the
batch it would have seen.  Under DDP each rank keeps its share of the global batch's rows.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch

from ptmkit.tasks.classification import EncodedInputs, collate


class LabelledBatches:
    """``EncodedInputs`` + labels ``[N]`` -> padded batches with ``labels``."""

    def __init__(self, inputs: EncodedInputs, labels: np.ndarray, batch_size: int, pad_id: int, seed: int,
                 with_token_types: bool, rank: int = 0, world_size: int = 1) -> None:
        self.inputs = inputs
        self.labels = np.asarray(labels)
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.seed = seed
        self.with_token_types = with_token_types
        self.rank, self.world_size = rank, world_size
        self.steps_per_epoch = math.ceil(len(inputs) / batch_size)

    def rows(self, epoch: int, step: int) -> np.ndarray:
        """Example indices of global batch ``step`` of ``epoch``."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.inputs))
        return order[step * self.batch_size : (step + 1) * self.batch_size]

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        rows = np.array_split(self.rows(epoch, step), self.world_size)[self.rank]
        return collate(self.inputs, rows, self.pad_id, self.labels, self.with_token_types)

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(())
