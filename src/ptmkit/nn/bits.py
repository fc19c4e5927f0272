"""Scalar helpers for numba kernels over float32 and bfloat16 data.

numba has no scalar bit cast, and its ``math.exp`` is a call into libm that keeps a loop from
vectorising (without Intel's SVML, which is not a dependency).  These are the pieces the CPU
kernels in :mod:`ptmkit.nn` share:

* ``f32_from_bits`` / ``f32_bits``: reinterpret an int32 as a float32 and back (an LLVM
  ``bitcast``, no instruction);
* ``bf16_to_f32`` / ``f32_to_bf16``: bfloat16 is the top half of a float32, so widening is a
  shift and narrowing rounds to the nearest even (NaN stays a quiet NaN), as PyTorch rounds;
  ``round_to_bf16`` is the narrowing without the NaN guard, for values that cannot need it;
* ``exp_f32``: ``exp(x)`` for ``x <= 0`` from a Cody-Waite range reduction and Cephes' degree-6
  polynomial (relative error about 2e-7, as ``expf``), branch-free so loops over it vectorise.
* :func:`kernels_win`: whether the (single-threaded) kernels beat PyTorch's multi-threaded
  element-wise code at the current ``torch.get_num_threads()``.

Arrays of bfloat16 reach numba as ``uint16`` views (:func:`as_numpy`).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload


@intrinsic
def f32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the low 32 bits of the integer ``bits``."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = context.cast(builder, args[0], signature.args[0], types.int32)
        return builder.bitcast(low, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def f32_bits(typingctx, value):
    """The bit pattern of the float32 ``value`` as an int32."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@numba.njit(inline="always")
def bf16_to_f32(u):
    """A bfloat16 bit pattern (uint16) as float32: exact."""
    return f32_from_bits(np.int32(u) << np.int32(16))


@numba.njit(inline="always")
def round_to_bf16(x):
    """float32 -> bfloat16 bit pattern (uint16), rounded to the nearest even, without a NaN
    guard: exact for finite values and inf, and for a NaN whose low 16 bits are zero (a product
    of a widened bf16 and a finite number), which the rounding increment cannot carry into the
    exponent.  The guard in :func:`f32_to_bf16` costs a hot loop 1.7x."""
    b = f32_bits(x)
    return np.uint16((b + np.int32(0x7FFF) + ((b >> np.int32(16)) & np.int32(1))) >> np.int32(16))


@numba.njit(inline="always")
def f32_to_bf16(x):
    """float32 -> bfloat16 bit pattern (uint16), rounded to the nearest even; NaN -> quiet NaN."""
    b = f32_bits(x)
    nan = (b & np.int32(0x7FFFFFFF)) > np.int32(0x7F800000)
    return np.uint16(((b >> np.int32(16)) | np.int32(0x40)) if nan else round_to_bf16(x))


_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)  # ln 2 split so that k * _LN2_HI is exact for |k| < 2^9
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.0)  # below this exp underflows the normal range: clamp (error < 2e-38)


@numba.njit(inline="always")
def exp_f32(x):
    """``exp(x)`` for float32 ``x <= 0`` (larger ``x`` overflows the exponent field; the callers
    subtract a row maximum first).  NaN gives NaN; -inf gives about 1.6e-38, not 0."""
    x = x if x > _EXP_MIN or x != x else _EXP_MIN
    k = np.float32(np.floor(x * _LOG2E + np.float32(0.5)))
    r = x - k * _LN2_HI
    r = r - k * _LN2_LO
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    return p * f32_from_bits((np.int32(k) + np.int32(127)) << np.int32(23))


# The kernels run on the calling thread (numba's own threads would be a second OpenMP runtime
# spinning beside PyTorch's).  Measured on two cores, one kernel thread did the work of 2.5-3.4 of
# PyTorch's threads (tanh GELU: 2.6 ms on one against 4.4 ms on two; the MLM head's cross-entropy:
# 10.1 against 12.6); with more threads than this PyTorch's path is expected to win.
KERNEL_MAX_THREADS = 3


def kernels_win() -> bool:
    """True when PyTorch runs on at most ``KERNEL_MAX_THREADS`` threads: the single-threaded
    kernels are then faster than its element-wise code; with more, callers take PyTorch's path.
    False inside a ``torch.compile`` graph: a numba call would break the graph at every kernel,
    and the compiler fuses PyTorch's element-wise code itself."""
    if torch.compiler.is_compiling():
        return False
    return torch.get_num_threads() <= KERNEL_MAX_THREADS


def widen(v):
    """float32 value of an element of a float32 array or of a bf16 (uint16) array (numba only)."""
    raise NotImplementedError("widen is for numba kernels")


def narrow(x, like):
    """float32 ``x`` as an element for an array of ``like``'s dtype: float32, or bf16 (uint16)."""
    raise NotImplementedError("narrow is for numba kernels")


def narrow_unguarded(x, like):
    """:func:`narrow` through :func:`round_to_bf16`: for results of float32 arithmetic on
    widened bf16 or PyTorch values, whose NaNs keep the low 16 bits zero (numba only)."""
    raise NotImplementedError("narrow_unguarded is for numba kernels")


@overload(widen, inline="always")
def _widen(v):
    if v == types.uint16:
        return lambda v: bf16_to_f32(v)
    if v == types.float32:
        return lambda v: v
    return None


def _narrowing(to_bf16):
    """The overload of a narrowing whose bf16 rounding is ``to_bf16``."""

    def impl(x, like):
        if like == types.uint16:
            return lambda x, like: to_bf16(x)
        if like == types.float32:
            return lambda x, like: np.float32(x)
        return None

    return impl


overload(narrow, inline="always")(_narrowing(f32_to_bf16))
overload(narrow_unguarded, inline="always")(_narrowing(round_to_bf16))


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as numpy, same shape (bf16 as its uint16 bit patterns)."""
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
