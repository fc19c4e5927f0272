"""Deterministic pre-training batches: the batch of (epoch, step) is a pure function of the seed.

Resuming at (epoch, step) therefore needs no replay: the permutation of epoch ``e`` is
``default_rng([seed, e]).permutation(n_spans)`` and the randomness of the batch (masking,
negatives) comes from ``default_rng([seed, e, step, 1])``.  Every rank collates the whole global
batch and keeps its own contiguous block of rows, so the examples and their masks are identical
whatever the world size.

An objective that ``reads_streams`` (its spans are consecutive blocks of one stream, in order)
gets its spans laid out as ``batch_size`` parallel streams instead of shuffled: the ``N`` spans
are cut into ``batch_size`` contiguous runs of ``steps_per_epoch`` blocks, row ``r`` of step ``s``
is block ``r * steps_per_epoch + s``, so row ``r`` of step ``s + 1`` continues the text of row
``r`` of step ``s``.  Its training batches carry ``stream_ids [B]`` (the row's stream, the global
row index) and ``stream_steps [B]`` (its block within the stream), which survive DDP and
gradient-accumulation slicing, so an objective can carry a state per stream and tell a
continuation from a restart (a new epoch starts every stream again at step 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch

from ptmkit.errors import PtmError

EVAL_STREAM = 999_999  # the rng stream of evaluation batches (never a real epoch)
SPLIT_STREAM = 777_777  # the rng stream of split_spans


class Collator(Protocol):
    def collate(self, corpus: Any, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]: ...


def _rows(batch: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """Rows ``lo:hi`` of every tensor/array in ``batch`` (other values are passed through)."""
    return {k: (v[lo:hi] if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim > 0 else v) for k, v in batch.items()}


class PretrainBatches:
    """A :class:`ptmkit.train.step.BatchSource` over example ``spans`` of a corpus.

    spans: int64 [N, 2] token spans (from ``objective.example_spans``); batch_size: the global
    batch per optimizer step (split evenly over ``world_size`` ranks); the last partial batch
    of an epoch is dropped so every step has the same size.
    """

    def __init__(
        self,
        corpus: Any,
        objective: Collator,
        spans: np.ndarray,
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        spans = np.asarray(spans, dtype=np.int64)
        if spans.ndim != 2 or spans.shape[1] != 2:
            raise PtmError(f"spans must have shape [N, 2], got {tuple(spans.shape)}")
        if batch_size < 1:
            raise PtmError(f"batch_size must be positive, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise PtmError(f"invalid rank {rank} of world_size {world_size}")
        if batch_size % world_size:
            raise PtmError(
                f"the global batch_size {batch_size} is not divisible by the {world_size} processes; "
                f"use a multiple of {world_size}"
            )
        if len(spans) == 0:
            raise PtmError("no examples: the corpus is empty or every span was too short")
        self.corpus = corpus
        self.objective = objective
        self.spans = spans
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.steps_per_epoch = len(spans) // batch_size
        self.streams = bool(getattr(objective, "reads_streams", False))
        self._perm_epoch: int | None = None
        self._perm: np.ndarray | None = None

    def permutation(self, epoch: int) -> np.ndarray:
        """The order of the spans in ``epoch`` (cached for the current epoch)."""
        if self._perm_epoch != epoch:
            if self.streams:  # the same parallel streams every epoch (see the module docstring)
                n = self.steps_per_epoch * self.batch_size
                self._perm = np.arange(n).reshape(self.batch_size, self.steps_per_epoch).T.reshape(-1)
            else:
                self._perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.spans))
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def global_rows(self, epoch: int, step: int) -> np.ndarray:
        """Indices into ``spans`` of global batch ``step`` of ``epoch`` ([batch_size])."""
        if self.steps_per_epoch == 0:
            raise PtmError(
                f"only {len(self.spans)} training examples for a batch of {self.batch_size}: "
                "use a smaller batch_size or seq_len, or more text"
            )
        if not 0 <= step < self.steps_per_epoch:
            raise IndexError(f"step {step} outside epoch of {self.steps_per_epoch} steps")
        b = self.batch_size
        return self.permutation(epoch)[step * b : (step + 1) * b]

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        """This rank's rows ([batch_size // world_size, ...]) of global batch ``step`` of ``epoch``."""
        rows = self.global_rows(epoch, step)
        rng = np.random.default_rng([self.seed, epoch, step, 1])
        batch = self.objective.collate(self.corpus, self.spans[rows], rng)
        if self.streams:
            batch["stream_ids"] = torch.arange(self.batch_size, dtype=torch.int64)
            batch["stream_steps"] = torch.full((self.batch_size,), step, dtype=torch.int64)
        if self.world_size == 1:
            return batch
        per = self.batch_size // self.world_size
        return _rows(batch, self.rank * per, (self.rank + 1) * per)

    @property
    def eval_steps(self) -> int:
        """Number of evaluation batches (the last one may be partial)."""
        return -(-len(self.spans) // self.batch_size)

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """All spans in order, ``batch_size`` at a time, with fixed randomness (same every call).

        Under several ranks each rank gets its contiguous share of every batch (shares differ by
        at most one row; an empty share is skipped).
        """
        b = self.batch_size
        for i in range(self.eval_steps):
            spans = self.spans[i * b : (i + 1) * b]
            rng = np.random.default_rng([self.seed, EVAL_STREAM, i])
            batch = self.objective.collate(self.corpus, spans, rng)
            if self.world_size > 1:
                n = len(spans)
                lo, hi = n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size
                if hi == lo:
                    continue
                batch = _rows(batch, lo, hi)
            yield batch


def split_spans(spans: np.ndarray, eval_fraction: float, seed: int, contiguous: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Hold out ``round(eval_fraction * N)`` (at least 1 if the fraction is > 0) random spans,
    or with ``contiguous`` the last ones (a stream's training part then has no holes).

    Deterministic in ``seed``; both parts keep the corpus order.  Returns (train [N-k, 2], eval [k, 2]).
    """
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if not 0.0 <= eval_fraction < 1.0:
        raise PtmError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    n = len(spans)
    k = 0 if eval_fraction == 0 else max(1, int(round(eval_fraction * n)))
    if k >= n:
        raise PtmError(f"cannot hold out {k} of {n} examples for evaluation: the corpus is too small")
    held = np.zeros(n, dtype=bool)
    if contiguous:
        held[n - k:] = True
        return spans[~held], spans[held]
    held[np.random.default_rng([int(seed), SPLIT_STREAM]).permutation(n)[:k]] = True
    return spans[~held], spans[held]
