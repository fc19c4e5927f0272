"""Dropout whose keep mask comes from a counter-based hash instead of ``bernoulli_``.

On CPU, ``torch.nn.functional.dropout`` draws its mask with ``bernoulli_``, about 0.2 G
elements/s on two cores: a fifth of a small Transformer's training step (the attention
probabilities alone are ``[B, heads, T, T]``).  Here the mask is ``splitmix64(seed + i)``
compared with ``p · 2^24`` in a vectorised numba loop (several G elements/s on one core), with
one seed per call drawn from PyTorch's default generator, so ``torch.manual_seed`` and a
checkpoint's saved RNG state still make a run repeat exactly.  The mask is never stored: the
forward pass writes ``y = x · mask / (1 - p)`` in one pass and the backward pass recomputes the
mask from the seed (fp32, fp64 and bf16 — autocast's dtype — in the kernel; fp16 through a
stored mask).

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


@numba.njit(cache=True, inline="always")
def _keep(s: np.uint64, i: int, t: np.uint64) -> bool:
    """Element ``i`` of the stream ``s`` is kept: splitmix64's output ``i`` (a pure function of
    ``s + (i + 1) · γ``, no carried state, so loops over ``i`` vectorise), top 24 bits >= t."""
    z = s + np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(64 - _THRESHOLD_BITS)) >= t


@numba.njit(cache=True)
def _keep_mask(out: np.ndarray, seed: int, threshold: int) -> None:
    """out[i] = element i is kept, for a flat bool array ``out``."""
    s, t = np.uint64(seed), np.uint64(threshold)
    for i in range(out.size):
        out[i] = _keep(s, i, t)


@numba.njit(cache=True)
def _apply(x: np.ndarray, out: np.ndarray, seed: int, threshold: int, scale: float) -> None:
    """out = x · keep / (1 - p) for flat float32/float64 arrays, the mask recomputed from the seed
    (a product, not a branch: it vectorises, and a dropped inf gives NaN as in ``F.dropout``)."""
    s, t = np.uint64(seed), np.uint64(threshold)
    c = x.dtype.type(scale)
    for i in range(x.size):
        out[i] = x[i] * (c * x.dtype.type(_keep(s, i, t)))


@numba.njit(cache=True)
def _apply_bf16(x: np.ndarray, out: np.ndarray, seed: int, threshold: int, scale: float) -> None:
    """The same on bf16 bit patterns (flat uint16 arrays), a block at a time: widen to fp32 bits,
    scale as fp32, round to the nearest even bf16 (NaN stays a quiet NaN)."""
    s, t = np.uint64(seed), np.uint64(threshold)
    c = np.float32(scale)
    block = 4096
    bits = np.empty(block, dtype=np.uint32)
    f = bits.view(np.float32)
    for lo in range(0, x.size, block):
        n = min(block, x.size - lo)
        xs, ys = x[lo:lo + n], out[lo:lo + n]
        for j in range(n):
            bits[j] = np.uint32(xs[j]) << np.uint32(16)
        for j in range(n):
            f[j] = f[j] * (c * np.float32(_keep(s, lo + j, t)))
        for j in range(n):
            b = bits[j]
            rounded = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
            ys[j] = np.uint16(((b >> np.uint32(16)) | np.uint32(0x40)) if nan else rounded)


def _threshold(p: float) -> int:
    return int(round(p * (1 << _THRESHOLD_BITS)))


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, seed: int) -> torch.Tensor:
    """A bool tensor of ``shape``, each element True with probability ``1 - p``, a pure function
    of ``seed`` (the same seed gives the same mask)."""
    out = np.empty(int(np.prod(shape)), dtype=np.bool_)
    _keep_mask(out, seed, _threshold(p))
    return torch.from_numpy(out).view(shape)


_KERNEL_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def apply_mask(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """``x · keep_mask(x.shape, p, seed) / (1 - p)`` in one pass, without storing the mask."""
    scale = 1.0 / (1.0 - p)
    if x.dtype not in _KERNEL_DTYPES:  # float16: the stored-mask route
        return torch.ops.aten.native_dropout_backward(x, keep_mask(x.shape, p, seed), scale)
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.dtype == torch.bfloat16:
        _apply_bf16(x.view(torch.int16).numpy().view(np.uint16).reshape(-1),
                    out.view(torch.int16).numpy().view(np.uint16).reshape(-1), seed, _threshold(p), scale)
    else:
        _apply(x.numpy().reshape(-1), out.numpy().reshape(-1), seed, _threshold(p), scale)
    return out


class _HashDropout(torch.autograd.Function):
    """Forward and backward apply the same mask, recomputed from the call's seed: nothing but
    the seed is kept for the backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        seed = int(torch.randint(0, _SEED_HIGH, (1,)).item())  # advances the default generator
        ctx.seed, ctx.p = seed, p
        return apply_mask(x.detach(), p, seed)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return apply_mask(grad, ctx.p, ctx.seed), None


def _check(p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the fast CPU mask: zero each element with probability
    ``p`` and scale the rest by ``1 / (1 - p)``.  Same shape and dtype as ``x``."""
    if not training or p == 0.0:
        return x
    _check(p)
    if x.device.type != "cpu" or not x.is_floating_point():
        return F.dropout(x, p, training=True)
    return _HashDropout.apply(x, p)


class Dropout(nn.Module):
    """Drop-in for ``torch.nn.Dropout`` (no parameters, so checkpoints do not change) that uses
    :func:`dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        _check(p)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
