"""Scoring every (image, text) pair with a function that reads pairs, a chunk of pairs at a time.

A cross-encoder or a generative objective (the caption LM) cannot score an image against many
texts with one matrix product: each pair is its own forward pass.  :func:`score_pairs` walks the
``N x M`` pairs in row-major order, ``chunk`` pairs per call, so the work per call (and its
memory) is bounded whatever ``N`` and ``M`` are.
"""

from __future__ import annotations

from typing import Callable

import torch

from ptmkit.errors import PtmError

PairFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def score_pairs(fn: PairFn, n_images: int, n_texts: int, chunk: int) -> torch.Tensor:
    """``[n_images, n_texts]``: entry ``(i, j)`` is ``fn(image_index, text_index)`` at the position
    where ``image_index == i`` and ``text_index == j``.

    ``fn(image_index [P], text_index [P]) -> [P]`` receives int64 CPU tensors of at most ``chunk``
    pairs (a pair's image index is ``k // n_texts`` and its text index ``k % n_texts`` for the
    flat pair number ``k``), and returns one score per pair on any device; the result is on the
    device and in the dtype of the first chunk's scores (float32 on the CPU when there is no pair).
    """
    if chunk < 1:
        raise PtmError(f"score_batch must be a positive number of pairs, got {chunk!r}")
    if n_images < 0 or n_texts < 0:
        raise PtmError(f"cannot score {n_images} images against {n_texts} texts")
    total = n_images * n_texts
    out: torch.Tensor | None = None
    for lo in range(0, total, chunk):
        k = torch.arange(lo, min(lo + chunk, total), dtype=torch.long)
        scores = fn(k // n_texts, k % n_texts)
        if scores.shape != k.shape:
            raise PtmError(f"a pair scorer returned shape {tuple(scores.shape)} for {k.numel()} pairs; "
                           f"it must return one score per pair")
        if out is None:
            out = torch.empty(total, dtype=scores.dtype, device=scores.device)
        out[lo : lo + k.numel()] = scores
    if out is None:
        return torch.zeros(n_images, n_texts)
    return out.view(n_images, n_texts)


__all__ = ["score_pairs"]
