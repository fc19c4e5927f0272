"""Types shared by every trainable model and the trainer.

Any ``nn.Module`` whose ``forward(batch: dict) -> StepOutput`` can be trained by
:class:`ptmkit.train.trainer.Trainer`; pre-training wraps ``Backbone`` + ``Objective`` this way,
NNLM and fine-tuning heads do too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol

import torch

from ptmkit.nn.host import count


@dataclass
class StepOutput:
    """Result of one forward pass.

    loss: scalar tensor to minimise (mean over the predicted positions of this micro-batch).
    metrics: scalar tensors to log (e.g. ``mlm_loss``, ``nsp_acc``); averaged over a log window.
    n_tokens: number of input tokens processed (for tokens/s).
    n_predictions: number of positions the loss averages over (for token-weighted eval averages).
    Both are ints, or 0-d tensors where reading them in the forward pass would stall a GPU or break
    a compiled graph (:func:`ptmkit.nn.host.count`); the trainer reads them with the loss.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    n_tokens: int | torch.Tensor = 0
    n_predictions: int | torch.Tensor = 0


def input_tokens(batch: dict[str, torch.Tensor]) -> int | torch.Tensor:
    """A :class:`StepOutput`'s ``n_tokens`` for ``batch``: its attention mask's ones, else every
    input id; an int on a CPU, a 0-d tensor on a GPU or inside a compiled graph
    (:func:`ptmkit.nn.host.count`)."""
    mask = batch.get("attention_mask")
    if mask is None:
        return batch["input_ids"].numel()
    return count(mask.sum())


class BatchSource(Protocol):
    """Deterministic batches: the batch is a pure function of (epoch, step) and the source's seed.

    ``steps_per_epoch`` is the number of *global* batches per epoch; under DDP each rank's source
    returns its own slice of the global batch, so resuming never replays data.
    """

    steps_per_epoch: int

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]: ...

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]: ...
