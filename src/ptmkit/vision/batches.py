"""Batches of image–caption pairs: a pure function of (seed, epoch, step), like every ptmkit batch source.

Each epoch is a seeded permutation of the training *concepts*; a batch takes ``batch_size`` of
them, for each one of its images (a random style when there are several) and a caption drawn
from the concept's templates.  Concepts are distinct within a batch, so every other row of a
contrastive batch is a true negative.  ``steps_per_epoch = concepts // batch_size``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from ptmkit.vision.augment import AugmentConfig, to_pixels
from ptmkit.vision.data import ImageTextSet


def tokenize(tokenizer, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] text [SEP]`` ids, truncated to ``max_len`` (keeping the final ``[SEP]``) and
    right-padded: ``input_ids [B, T]``, ``attention_mask [B, T]`` (T = longest row)."""
    pad, sep = tokenizer.token_to_id("[PAD]"), tokenizer.token_to_id("[SEP]")
    ids = [row if len(row) <= max_len else row[: max_len - 1] + [sep]
           for row in tokenizer.encode_batch(texts, add_special_tokens=True)]
    width = max(len(r) for r in ids)
    out = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        out[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return out, mask


class ImageTextBatches:
    """Training batches of ``data``'s ``split`` rows; ``eval_batches()`` reads ``eval_split`` with
    each concept's name and no augmentation."""

    def __init__(self, data: ImageTextSet, tokenizer, batch_size: int, seed: int, augment: AugmentConfig,
                 max_len: int = 32, split: str = "train", eval_split: str = "dev", rank: int = 0,
                 world_size: int = 1) -> None:
        self.data, self.tokenizer, self.batch_size, self.seed = data, tokenizer, batch_size, seed
        self.augment, self.max_len, self.eval_split = augment, max_len, eval_split
        self.rank, self.world_size = rank, world_size
        rows = data.rows(split)
        self.concepts = np.unique(data.concept[rows])
        # each concept's image rows (several styles or photos of one thing)
        order = np.argsort(data.concept[rows], kind="stable")
        bounds = np.searchsorted(data.concept[rows][order], self.concepts, side="left")
        self.rows_of = np.split(rows[order], bounds[1:])
        self.steps_per_epoch = len(self.concepts) // batch_size

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.concepts))
        picked = perm[step * self.batch_size: (step + 1) * self.batch_size]
        rng = np.random.default_rng([self.seed, epoch, step, 1])
        rows = np.array([self.rows_of[k][int(rng.integers(len(self.rows_of[k])))] for k in picked])
        concepts = self.data.concept[rows]
        captions = [self.data.caption(int(c), rng) for c in concepts]
        batch = self._batch(rows, captions, rng)
        per = self.batch_size // self.world_size
        lo = self.rank * per
        return {k: v[lo: lo + per] for k, v in batch.items()}

    def _batch(self, rows: np.ndarray, captions: list[str], rng: np.random.Generator | None) -> dict[str, torch.Tensor]:
        ids, mask = tokenize(self.tokenizer, captions, self.max_len)
        pixels = to_pixels(np.asarray(self.data.images[rows]), self.augment, rng)
        return {"pixels": pixels, "input_ids": ids, "attention_mask": mask,
                "concept": torch.as_tensor(self.data.concept[rows], dtype=torch.long)}

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        rows = self.data.rows(self.eval_split)
        _, first = np.unique(self.data.concept[rows], return_index=True)  # one image per concept
        rows = rows[np.sort(first)]
        size = min(self.batch_size, len(rows))  # full batches (a fixed number of negatives), or all when fewer
        for lo in range(0, len(rows) - size + 1, size) if size > 1 else ():
            chunk = rows[lo: lo + size]
            yield self._batch(chunk, [self.data.text(int(c)) for c in self.data.concept[chunk]], None)
