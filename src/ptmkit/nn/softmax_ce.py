"""Softmax cross-entropy and top-1 accuracy of a logit matrix in one CPU kernel.

``softmax_cross_entropy(logits [N, C], target [N])`` returns
``(F.cross_entropy(logits.float(), target), (logits.argmax(-1) == target).float().mean())``:
the mean over the rows whose target is not -100 (NaN when none is, as PyTorch's) and the
accuracy over all rows.  The loss is differentiable in ``logits``; its gradient has the
logits' dtype.

Why a kernel: a masked LM's head ends in ``[N, V]`` logits (608 x 8000 for a batch of 32 x 128
at 15 %).  Under bf16 autocast PyTorch casts them to float32, runs log-softmax, the NLL, its
backward into a zeroed matrix, the log-softmax backward and a cast back: eight passes over the
matrix and three copies of it, about 16 ms a step on two cores, where the matrix products
that produce the logits take 20 ms.  Here a forward pass reads the logits twice (row maximum,
then the sum of exponentials, in float32 whatever the input dtype) and keeps only each row's
log-sum-exp; the backward pass reads them once more and writes ``softmax - onehot``, scaled,
straight in the logits' dtype.  On that matrix, forward and backward: bf16 10.1 ms on one core
against 12.6 ms for PyTorch's route on two, float32 7.7 against 10.5 ms.

The kernel runs on the calling thread only.  Split over two threads it took 4 ms alone but no
less inside a training step: it runs right after a matrix product, when PyTorch's OpenMP
workers still spin-wait on the other cores (and numba's own ``parallel=True`` adds a second
OpenMP runtime whose threads spin in turn: a causal LM's loss, eight such calls a step, went
from 43 to 137 ms with it).

Other devices, dtypes, small matrices (below ``MIN_KERNEL_ELEMENTS``) and PyTorch on more than
``bits.KERNEL_MAX_THREADS`` threads take PyTorch's path.

``softmax_nll_(logits, target)`` is the same row pass for :mod:`ptmkit.nn.linear_ce`'s bf16
tiles: it returns the NLL and leaves the softmax in place of the logits, in their dtype, for the
gradient products that follow.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F

from ptmkit.nn.bits import as_numpy, exp_f32, kernels_win, narrow_unguarded, widen
from ptmkit.nn.targets import IGNORE_INDEX

MIN_KERNEL_ELEMENTS = 1 << 15  # below this the kernel's call overhead outweighs its passes
# The row reductions are separate functions (not inlined by numba) so that their own fastmath
# flags apply: the maximum may ignore NaN (so it vectorises); the sum of exponentials may only
# reorder, so a NaN or an inf - inf in the row still reaches the log-sum-exp.
_LANES = 16
_SUM_FLAGS = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(fastmath=True, cache=True)
def _row_max(row):
    """The maximum of one row in float32 (NaNs may be skipped: the sum below catches them).
    Sixteen running maxima, one per lane of a vector register (1.6x one running maximum)."""
    lanes = np.full(_LANES, -np.inf, dtype=np.float32)
    body = row.size // _LANES * _LANES
    for j in range(0, body, _LANES):
        for k in range(_LANES):
            v = widen(row[j + k])
            lanes[k] = v if v > lanes[k] else lanes[k]
    m = lanes.max()
    for j in range(body, row.size):
        v = widen(row[j])
        m = v if v > m else m
    return m


@numba.njit(fastmath=_SUM_FLAGS, cache=True)
def _row_sum_exp(row, m):
    """sum_j exp(row[j] - m) in float32; NaN if the row holds a NaN (or m is inf)."""
    s = np.float32(0.0)
    for j in range(row.size):
        s += exp_f32(widen(row[j]) - m)
    return s


@numba.njit(nogil=True, cache=True)
def _forward(x, target, lse, nll, correct):
    """Per row n of ``x [N, C]`` (float32, or bf16 as uint16): its log-sum-exp, the NLL of
    ``target[n]`` (0 for an ignored row) and whether the first maximum is the target."""
    for n in range(x.shape[0]):
        row = x[n]
        m = _row_max(row)
        l = m + np.float32(np.log(_row_sum_exp(row, m)))
        lse[n] = l
        t = target[n]
        nll[n] = l - widen(row[t]) if t != IGNORE_INDEX else np.float32(0.0)
        am = 0  # the first index of the maximum, as torch.argmax
        while am < row.size - 1 and widen(row[am]) != m:
            am += 1
        correct[n] = t != IGNORE_INDEX and am == t and l == l


@numba.njit(nogil=True, cache=True)
def _backward(x, target, lse, out, scale):
    """out[n] = (softmax(x[n]) - onehot(target[n])) * scale in x's dtype (float32 arithmetic,
    one rounding); zero for an ignored row."""
    for n in range(x.shape[0]):
        row, o, l, t = x[n], out[n], lse[n], target[n]
        c = np.float32(scale) if t != IGNORE_INDEX else np.float32(0.0)
        for j in range(row.size):  # the one-hot as a select, not a store after the loop
            o[j] = narrow_unguarded(exp_f32(widen(row[j]) - l) * c - (c if j == t else np.float32(0.0)), row[j])


@numba.njit(fastmath={"contract"}, error_model="numpy", cache=True)
def _row_softmax_(row, l):
    """row[j] = exp(row[j] - l) in place, rounded to row's dtype.  A loop over one array: with
    a second argument aliasing it, LLVM's overlap check would keep the loop scalar."""
    for j in range(row.size):
        row[j] = narrow_unguarded(exp_f32(widen(row[j]) - l), row[j])


@numba.njit(nogil=True, cache=True)
def _softmax_nll_rows(x, m, target, nll):
    """Per row n of ``x [N, C]`` given its maximum ``m[n]``: the NLL of ``target[n]`` into
    ``nll[n]``, then the row's softmax over the row (two passes; the row stays in cache)."""
    for n in range(x.shape[0]):
        row = x[n]
        l = m[n] + np.float32(np.log(_row_sum_exp(row, m[n])))
        nll[n] = l - widen(row[target[n]])
        _row_softmax_(row, l)


def _kernel_applies(logits: torch.Tensor) -> bool:
    """A contiguous 2-D CPU tensor of float32 or bfloat16, large enough to be worth the call."""
    return (logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16)
            and logits.dim() == 2 and logits.is_contiguous() and logits.shape[1] > 0
            and logits.numel() >= MIN_KERNEL_ELEMENTS and kernels_win())


class _SoftmaxCrossEntropy(torch.autograd.Function):
    """Forward keeps only each row's log-sum-exp; backward recomputes the softmax from it."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        N = logits.shape[0]
        lse = torch.empty(N, dtype=torch.float32)
        nll = torch.empty(N, dtype=torch.float32)
        correct = torch.empty(N, dtype=torch.bool)
        _forward(as_numpy(logits), target.numpy(), lse.numpy(), nll.numpy(), correct.numpy())
        valid = int((target != IGNORE_INDEX).sum())
        ctx.save_for_backward(logits, target, lse)
        ctx.valid = valid
        loss = nll.sum() / valid if valid else torch.tensor(float("nan"))
        accuracy = correct.float().sum() / max(valid, 1)
        ctx.mark_non_differentiable(accuracy)
        return loss, accuracy

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_accuracy: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        logits, target, lse = ctx.saved_tensors
        scale = float(grad_loss) / ctx.valid if ctx.valid else 0.0
        # a separate output: written in place over the logits the loop would not vectorise (7x slower)
        out = torch.empty_like(logits)
        _backward(as_numpy(logits), target.numpy(), lse.numpy(), as_numpy(out), scale)
        return out, None


def _check_targets(target: torch.Tensor, classes: int) -> torch.Tensor:
    """``target`` as contiguous int64, every entry a class index or -100 (else IndexError): the
    kernel indexes rows with it unchecked."""
    target = target.to(torch.int64).contiguous()
    bad = (target != IGNORE_INDEX) & ((target < 0) | (target >= classes))
    if bool(bad.any()):
        raise IndexError(f"target {int(target[bad][0])} is out of bounds for {classes} classes")
    return target


def softmax_nll_(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Overwrite ``logits [N, C]`` with ``softmax(logits)`` and return the NLL of ``target [N]``
    (float32, [N]); every target must be a class index (IndexError otherwise).  The kernel for
    contiguous CPU float32 / bf16 (the softmax rounded once to the logits' dtype; a [524, 8000]
    bf16 tile: 3.7 ms against 4.7 for a float32 log-softmax, its exponential and the casts),
    PyTorch elsewhere."""
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"softmax_nll_ expects logits [N, C] and target [N], got "
                         f"{tuple(logits.shape)} and {tuple(target.shape)}")
    target = _check_targets(target, logits.shape[1])
    if bool((target == IGNORE_INDEX).any()):
        raise IndexError("softmax_nll_ takes no ignored (-100) targets")
    if not (logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16)
            and logits.is_contiguous() and logits.shape[1] > 0 and kernels_win()):
        logp = torch.log_softmax(logits.float(), 1)
        logits.copy_(logp.exp())
        return -logp.gather(1, target[:, None]).squeeze(1)
    nll = torch.empty(logits.shape[0], dtype=torch.float32)
    row_max = logits.amax(1).float()  # PyTorch's reduction: vectorised and on both cores
    _softmax_nll_rows(as_numpy(logits), as_numpy(row_max), target.numpy(), nll.numpy())
    return nll


def _torch_path(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float() if logits.dtype != torch.float64 else logits  # half precision accumulates in float32
    valid = target != IGNORE_INDEX
    correct = (logits.detach().argmax(-1) == target) & valid
    return F.cross_entropy(logits, target, ignore_index=IGNORE_INDEX), correct.sum() / valid.sum().clamp(min=1)


def softmax_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, accuracy)`` of ``logits [N, C]`` (float32 or bfloat16) against ``target [N]``
    (class indices, -100 = ignored): the mean cross-entropy over the non-ignored rows, float32,
    differentiable in ``logits``; and the detached top-1 accuracy over the non-ignored rows, float32."""
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"softmax_cross_entropy expects logits [N, C] and target [N], got "
                         f"{tuple(logits.shape)} and {tuple(target.shape)}")
    logits = logits.contiguous()
    if not _kernel_applies(logits):
        return _torch_path(logits, target)
    return _SoftmaxCrossEntropy.apply(logits, _check_targets(target, logits.shape[1]))


__all__ = ["IGNORE_INDEX", "MIN_KERNEL_ELEMENTS", "softmax_cross_entropy", "softmax_nll_"]
