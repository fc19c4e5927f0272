"""Dropout whose keep mask comes from a counter-based hash instead of ``bernoulli_``.

On CPU, ``torch.nn.functional.dropout`` draws its mask with ``bernoulli_``, about 0.2 G
elements/s on two cores: a fifth of a small Transformer's training step (the attention
probabilities alone are ``[B, heads, T, T]``).  Here the mask is ``splitmix64(seed + i)``
compared with ``p · 2^24`` in a vectorised numba loop (several G elements/s on one core), with
one 63-bit seed per call drawn from PyTorch's default generator, so ``torch.manual_seed`` and a
checkpoint's saved RNG state still make a run repeat exactly.  The mask is stored (one byte per
element, as ``F.dropout``'s) and both directions apply it with ``native_dropout_backward``
(``y = x · mask / (1 - p)``), which works in any floating dtype, bf16 under autocast included.

Other devices keep ``F.dropout`` (their generators are fast).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_SEED_HIGH = 2**62  # seeds in [0, 2^62): exact in int64, no overflow when adding the counter
_THRESHOLD_BITS = 24  # the keep test uses the top 24 bits of each hash: p is exact to 6e-8


@numba.njit(cache=True, fastmath=True)
def _keep_mask(out: np.ndarray, seed: int, threshold: int) -> None:
    """out[i] = (splitmix64 output i of the stream ``seed``) >> 40 >= threshold, for a flat bool
    array ``out``; the loop has no carried state, so LLVM vectorises it."""
    s = np.uint64(seed)
    t = np.uint64(threshold)
    for i in range(out.size):
        z = s + np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        out[i] = (z >> np.uint64(64 - _THRESHOLD_BITS)) >= t


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, seed: int) -> torch.Tensor:
    """A bool tensor of ``shape``, each element True with probability ``1 - p``, a pure function
    of ``seed`` (the same seed gives the same mask)."""
    out = np.empty(int(np.prod(shape)), dtype=np.bool_)
    _keep_mask(out, seed, int(round(p * (1 << _THRESHOLD_BITS))))
    return torch.from_numpy(out).view(shape)


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        seed = int(torch.randint(0, _SEED_HIGH, (1,)).item())  # advances the default generator
        mask = keep_mask(x.shape, p, seed)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return torch.ops.aten.native_dropout_backward(x, mask, scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return torch.ops.aten.native_dropout_backward(grad, mask, ctx.scale), None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the fast CPU mask: zero each element with probability
    ``p`` and scale the rest by ``1 / (1 - p)``.  Same shape and dtype as ``x``."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if x.device.type != "cpu" or not x.is_floating_point():
        return F.dropout(x, p, training=True)
    return _HashDropout.apply(x, p)


class Dropout(nn.Module):
    """Drop-in for ``torch.nn.Dropout`` (no parameters, so checkpoints do not change) that uses
    :func:`dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
