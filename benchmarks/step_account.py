"""Where a training step's time goes: a per-operator account, against the matrix-product floor.

One training step (``zero_grad`` + forward + backward + optimizer step) of a model is run under
``torch.profiler`` for a few steps, and every operator's *self* time (its own time, without the
operators it calls, so nothing is counted twice) is put into one row:

==================  ===================================================================================
row                 operators
==================  ===================================================================================
matmul              matrix products: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, oneDNN linear, and the
                    ``linear`` / ``matmul`` wrappers' own dispatch time
attention core      fused scaled-dot-product attention (forward and backward) and a written-out
                    attention's ``softmax``
norms               layer norm, RMS norm (forward and backward)
activations         GELU, ReLU, SiLU, tanh, sigmoid (forward and backward), ptmkit's GELU kernel
dropout             ``dropout`` / ``bernoulli`` and ptmkit's hashed dropout kernel
loss                ``log_softmax``, ``nll_loss``, cross-entropy, ptmkit's fused softmax / linear
                    cross-entropy kernels (their matrix products stay in *matmul*)
optimizer           everything inside ``optimizer.step`` and ``zero_grad``
copies / casts      ``copy_``, ``_to_copy`` (autocast's casts), ``clone``, ``contiguous``, ``cat``,
                    embedding lookups and their backward, indexing, ``fill_``/``zero_``, allocations
elementwise         other element-wise and reduction operators (residual adds, bias gradients' sums)
framework           the autograd engine's own time and the Python time between operators: the step's
                    wall time minus every operator's self time
==================  ===================================================================================

ptmkit's own numba kernels run inside ``torch.autograd.Function`` s, which the profiler names by
class (``_HashDropout``, ``_HashDropoutBackward``): their numba time is their self time.

The *floor* of the matmul and attention rows is their FLOPs (counted by :func:`ptmkit.flops.counter`
on one step) over the machine's measured matrix-product peak for the step's dtype: the time the
step would take if it did nothing else and ran its products at the peak.  The profiler adds a few
microseconds per operator, so the profiled step is a little slower than the timed one; the shares
are of the profiled step, and the unprofiled median step time is reported beside it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from torch.profiler import ProfilerActivity, profile

ROWS = ("matmul", "attention core", "norms", "activations", "dropout", "loss", "optimizer", "copies / casts",
        "elementwise", "framework")
OPTIMIZER_REGIONS = ("Optimizer.step#", "Optimizer.zero_grad#")  # the profiler's own labels
_MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::linear",
           "aten::matmul", "aten::_addmm_activation", "mkldnn::_linear_pointwise", "aten::mkldnn_linear",
           "aten::einsum"}
_COPIES = ("copy_", "_to_copy", "aten::to", "clone", "contiguous", "aten::cat", "aten::stack", "embedding",
           "index", "gather", "scatter", "fill_", "zero_", "aten::zeros", "aten::empty", "aten::ones",
           "masked_fill", "aten::where", "aten::pad", "constant_pad", "resize_", "aten::full", "set_")
_KERNEL_ROWS = {"_HashDropout": "dropout", "_GeluTanh": "activations", "_SoftmaxCrossEntropy": "loss",
                "_LinearCrossEntropy": "loss"}


def classify(name: str) -> str:
    """The row of an operator (or a labelled region) by its profiler name."""
    n = name.lower()
    kernel = name.removesuffix("Backward")
    if kernel in _KERNEL_ROWS:
        return _KERNEL_ROWS[kernel]
    if name.removesuffix("_") in _MATMUL:  # in-place variants too (addmm_: a gradient accumulated into its buffer)
        return "matmul"
    if "scaled_dot_product" in n or "flash_attention" in n or "efficient_attention" in n:
        return "attention core"
    if "log_softmax" in n or "nll_loss" in n or "cross_entropy" in n:
        return "loss"
    if "softmax" in n:
        return "attention core"
    if "layer_norm" in n or "rms_norm" in n or "group_norm" in n:
        return "norms"
    if any(a in n for a in ("gelu", "relu", "silu", "tanh", "sigmoid", "threshold_backward")):
        return "activations"
    if "dropout" in n or "bernoulli" in n:
        return "dropout"
    if "adam" in n or "lamb" in n or "adafactor" in n:
        return "optimizer"
    if n.startswith("autograd::"):
        return "framework"
    if any(c in n for c in _COPIES):
        return "copies / casts"
    return "elementwise"


def _in_optimizer(event: Any) -> bool:
    while event is not None:
        if event.name.startswith(OPTIMIZER_REGIONS):
            return True
        event = event.cpu_parent
    return False


def account(step: Callable[[], Any], steps: int, matmul_flops: float, attention_flops: float, peak: float,
            timed_step_s: float | None = None) -> dict[str, Any]:
    """Profile ``steps`` calls of ``step`` (one training step each, with a ``torch.optim``
    optimizer) and return the per-row account, in milliseconds per step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - start
    rows = dict.fromkeys(ROWS, 0.0)
    counted = 0.0
    top: dict[str, float] = {}
    for event in prof.events():
        own = event.self_cpu_time_total / 1e3  # ms
        counted += own
        row = "optimizer" if _in_optimizer(event) else classify(event.name)
        rows[row] += own
        top[event.name] = top.get(event.name, 0.0) + own
    wall_ms = 1e3 * wall
    rows["framework"] += max(0.0, wall_ms - counted)  # Python between operators
    per_step = {k: v / steps for k, v in rows.items()}
    step_ms = wall_ms / steps
    floors = {"matmul": 1e3 * matmul_flops / peak, "attention core": 1e3 * attention_flops / peak}
    return {
        "profiled_step_ms": step_ms,
        "timed_step_ms": None if timed_step_s is None else 1e3 * timed_step_s,
        "rows_ms": per_step,
        "rows_share": {k: v / step_ms for k, v in per_step.items()},
        "floor_ms": floors,
        "floor_share_of_step": (floors["matmul"] + floors["attention core"]) / step_ms,
        "top_operators_ms": dict(sorted(((k, v / steps) for k, v in top.items()), key=lambda kv: -kv[1])[:12]),
    }


def flops_split(step: Callable[[], Any]) -> tuple[float, float]:
    """(matrix-product FLOPs, attention FLOPs) of one call of ``step``, as ptmkit counts them."""
    from ptmkit.flops import counter

    with counter() as fc:
        step()
    total, attention = 0.0, 0.0
    for op, n in fc.get_flop_counts().get("Global", {}).items():
        total += n
        if "scaled_dot_product" in str(op) or "attention" in str(op):
            attention += n
    return total - attention, attention


def table(name: str, acc: dict[str, Any]) -> str:
    """A printable account: ms per step and share of each row, the floors beside their rows."""
    lines = [f"{name}: profiled step {acc['profiled_step_ms']:.1f} ms"
             + (f" (timed without the profiler: {acc['timed_step_ms']:.1f} ms)" if acc.get("timed_step_ms") else "")]
    for row in ROWS:
        ms, share = acc["rows_ms"][row], acc["rows_share"][row]
        floor = acc["floor_ms"].get(row)
        extra = f"   floor {floor:6.1f} ms ({floor / ms:.0%} of the row)" if floor and ms else ""
        lines.append(f"  {row:15s} {ms:8.1f} ms {share:6.1%}{extra}")
    lines.append(f"  products at peak would take {acc['floor_share_of_step']:.1%} of this step")
    return "\n".join(lines)


def median_step(step: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
