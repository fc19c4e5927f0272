"""Element-wise CPU kernels where PyTorch makes extra passes or runs slowly on two cores.

* :func:`exp_into`: ``out = exp(x)`` for ``x <= 0`` (log-probabilities), float32 in, float32 or
  bfloat16 out, in place allowed.  PyTorch's ``exp_`` runs at about 0.5 ns an element on two
  cores; the vectorised :func:`~ptmkit.nn.bits.exp_f32` runs at 0.3 on one, and writing bf16
  directly saves the separate cast a half-precision matrix product needs (a ``[524, 8000]``
  tile: 2.5 ms as ``exp_`` + ``copy_`` against 1.5 ms).
* :func:`add_into`: ``acc += x`` for a float32 ``acc`` and a float32 or bfloat16 ``x``.  PyTorch
  adds a bf16 tensor into a float32 one through a float32 copy of it: a fresh allocation (which
  page-faults for a 4M-element weight gradient) and a second pass.
* :func:`gelu_tanh`: GPT-2's tanh GELU, differentiable.  PyTorch's takes 4-5 ms forward and as
  much backward per ``[4096, 1024]`` on two cores, in float32 and (slower still) in bf16; written
  as ``x · sigmoid(2u)``, ``u = sqrt(2/pi) (x + 0.044715 x^3)`` (the same function: ``(1 + tanh u)
  / 2 = sigmoid(2u)``, without the cancellation of ``1 + tanh u`` for negative u) over the
  vectorised exponential it takes about 2.3 and 2.9 ms on one.

The kernels run on the calling thread (see :mod:`ptmkit.nn.softmax_ce` for why not on numba's
threads); tensors that are not contiguous CPU float32 / bfloat16, and PyTorch running on more
than ``bits.KERNEL_MAX_THREADS`` threads, take PyTorch's path, with the same result up to rounding.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ptmkit.nn.bits import as_numpy, exp_f32, kernels_win, narrow_unguarded, widen

_KERNEL_DTYPES = (torch.float32, torch.bfloat16)
MIN_KERNEL_ELEMENTS = 1 << 14  # below this PyTorch's path: the call overhead outweighs the kernel
_ONE = np.float32(1.0)
_TWO_K = np.float32(2.0 * math.sqrt(2.0 / math.pi))  # 2u = _TWO_K (x + _A x^3)
_A = np.float32(0.044715)
_THREE_A = np.float32(3.0 * 0.044715)
_SIGMOID_FLUSH = np.float32(-80.0)  # sigmoid(v) < 2e-35 below: 0


def _numpy_flat(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's memory as a flat numpy array (bf16 as uint16 bit patterns)."""
    return as_numpy(t.view(-1))


def _kernel_applies(*tensors: torch.Tensor) -> bool:
    """Contiguous CPU float32 / bf16 tensors, and few enough threads for one kernel thread to win."""
    layout = all(t.device.type == "cpu" and t.dtype in _KERNEL_DTYPES and t.is_contiguous() for t in tensors)
    return layout and kernels_win()


@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def _exp(x, out):
    """out[i] = exp(x[i]) for float32 x <= 0; out float32 or bf16 (one rounding; the NaN guard
    of ``narrow`` would make the loop 1.9x slower, and a NaN here is an arithmetic result)."""
    for i in range(x.size):
        out[i] = narrow_unguarded(exp_f32(x[i]), out[i])


@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def _exp_inplace(x):
    """x[i] = exp(x[i]) for float32 x <= 0.  Its own loop: through ``_exp(x, x)`` the two
    arguments alias, LLVM's runtime overlap check fails and the loop runs scalar (10x slower)."""
    for i in range(x.size):
        x[i] = exp_f32(x[i])


@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def _add(acc, x):
    """acc[i] += x[i]: acc float32, x float32 or bf16 (widened exactly)."""
    for i in range(acc.size):
        acc[i] += widen(x[i])


@numba.njit(inline="always", error_model="numpy")
def _sigmoid_2u(x):
    """sigmoid(2u) for u = sqrt(2/pi) (x + 0.044715 x^3), float32: ``exp`` only of ``-|2u|``
    (the kernel's range), then ``1 / (1 + e)`` or ``e / (1 + e)`` by sign, a select; 0 far
    left (so ``x = -inf`` gives NaN, as PyTorch's)."""
    v = _TWO_K * (x + _A * x * x * x)
    e = exp_f32(-abs(v))
    e = e if v > _SIGMOID_FLUSH else np.float32(0.0)  # exp_f32 clamps at 1e-38: flush, so gelu(-20) = -0
    s = _ONE / (_ONE + e)
    return s if v >= np.float32(0.0) else e * s


@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def _gelu_tanh_forward(x, out):
    """out = x · sigmoid(2u(x)), float32 or bf16 (computed in float32, one rounding)."""
    for i in range(x.size):
        v = widen(x[i])
        out[i] = narrow_unguarded(v * _sigmoid_2u(v), out[i])


@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def _gelu_tanh_backward(x, grad, out):
    """out = grad · d/dx [x s], s = sigmoid(2u): ``s + x s (1 - s) · 2u'(x)``,
    ``2u' = _TWO_K (1 + 3 · 0.044715 x^2)``."""
    for i in range(x.size):
        v = widen(x[i])
        s = _sigmoid_2u(v)
        d = s + v * s * (_ONE - s) * _TWO_K * (_ONE + _THREE_A * v * v)
        out[i] = narrow_unguarded(widen(grad[i]) * d, out[i])


class _GeluTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = torch.empty_like(x)
        _gelu_tanh_forward(_numpy_flat(x), _numpy_flat(out))
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        grad = grad.to(x.dtype).contiguous()
        out = torch.empty_like(x)
        _gelu_tanh_backward(_numpy_flat(x), _numpy_flat(grad), _numpy_flat(out))
        return out


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``F.gelu(x,
    approximate="tanh")``): the kernels for contiguous CPU float32 / bfloat16 tensors of at
    least ``MIN_KERNEL_ELEMENTS``, PyTorch elsewhere.  First order only on the kernel's path (a
    double backward raises)."""
    # a tracer (ONNX export) cannot see into the kernel: it would record its output as a constant
    if _kernel_applies(x) and x.numel() >= MIN_KERNEL_ELEMENTS and not torch.jit.is_tracing():
        return _GeluTanh.apply(x)
    return torch.nn.functional.gelu(x, approximate="tanh")


def exp_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = exp(x)`` for a float32 ``x`` whose entries are ``<= 0`` (larger ones are outside
    the kernel's range: log-probabilities and other shifted logits only); ``out`` has ``x``'s
    shape, float32 or bfloat16, and may be ``x`` itself.  Returns ``out``."""
    if out.shape != x.shape:
        raise ValueError(f"exp_into: out {tuple(out.shape)} does not match x {tuple(x.shape)}")
    if x.dtype == torch.float32 and _kernel_applies(x, out):
        if out.data_ptr() == x.data_ptr() and out.dtype == x.dtype:
            _exp_inplace(_numpy_flat(x))
        else:
            _exp(_numpy_flat(x), _numpy_flat(out))
        return out
    return torch.exp(x, out=out)


def add_into(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``acc += x`` in place for a float32 ``acc`` and a same-shaped ``x`` (float32 or
    bfloat16), without a float32 copy of ``x``.  Returns ``acc``."""
    if acc.shape != x.shape:
        raise ValueError(f"add_into: x {tuple(x.shape)} does not match acc {tuple(acc.shape)}")
    if acc.dtype == torch.float32 and _kernel_applies(acc, x):
        _add(_numpy_flat(acc), _numpy_flat(x))
        return acc
    return acc.add_(x)


__all__ = ["MIN_KERNEL_ELEMENTS", "add_into", "exp_into", "gelu_tanh"]
