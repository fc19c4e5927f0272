"""The target of a position that is not predicted (padding, unmasked tokens, unused slots):
``IGNORE_INDEX``, PyTorch's ``cross_entropy`` default and HF's label convention, so labels built
here read the same in both."""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


def target_mask(labels: torch.Tensor) -> torch.Tensor:
    """``labels [B, T]`` of a right-padded target batch -> ``[B, T]`` (int64): 1 up to each row's
    last predicted position, 0 after it.  These are the decoder inputs a row really has: an ignored
    position before the last target stays (later positions attend to it); only the tail is padding."""
    real = labels != IGNORE_INDEX
    return real.flip(1).cummax(1).values.flip(1).long()


__all__ = ["IGNORE_INDEX", "target_mask"]
