"""Counting the floating-point operations of a training step (forward + backward).

``step_flops(model, batches)`` runs real training batches through ``model`` (any module whose
``forward(batch) -> StepOutput``, as the Trainer trains) under PyTorch's
:class:`torch.utils.flop_counter.FlopCounterMode` and returns the mean count per step.  Counting
the operations that actually run, rather than a formula such as 6·N·tokens, is what makes
comparisons at equal compute fair across objectives: ELECTRA's generator, MLM's output layer over
the masked positions only, UniLM's attention masks and ALBERT's shared layers (few parameters,
full compute) are all counted as they execute.

PyTorch's counter knows matrix products and convolutions, and the CUDA attention kernels, but
not the fused CPU kernels of scaled-dot-product attention and of the LSTM, nor oneDNN's linear
layer that inference on CPU runs (:mod:`ptmkit.nn.fast_linear`); :data:`CPU_FORMULAS` adds them.
Element-wise work (softmax, layer norm, GELU, the embedding lookup) is not counted, as in the usual
accounting (Kaplan et al. 2020; Clark et al. 2020 count the same way).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import flop_counter

aten = torch.ops.aten


def _sdpa_cpu(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """Forward of the fused CPU attention: QKᵀ and the weighted sum of V (full, even if causal)."""
    return flop_counter.sdpa_flop_count(query, key, value)


def _sdpa_cpu_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


def _lstm_forward_flops(input_shape, w_ih_shape, w_hh_shape) -> int:
    """One LSTM layer over a (T, B, in) or packed input: 2·(4h·in + 4h·h) per time step and row."""
    rows = 1
    for d in input_shape[:-1]:
        rows *= d
    gates, n_in = w_ih_shape
    return 2 * rows * gates * (n_in + w_hh_shape[1])


def _lstm_cpu(input, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    return _lstm_forward_flops(input, w_ih, w_hh)


def _lstm_cpu_backward(input, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    # the gradients with respect to the inputs and to the weights: twice the forward products
    return 2 * _lstm_forward_flops(input, w_ih, w_hh)


def _linear_pointwise(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """oneDNN's linear layer (``ptmkit.nn.fast_linear``, without autograd): 2·rows·in·out; the fused
    activation is element-wise, not counted."""
    rows = 1
    for d in x_shape[:-1]:
        rows *= d
    return 2 * rows * x_shape[-1] * w_shape[0]


def _addmm_inplace(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """``C.addmm_(A, B)`` (in-place accumulation, as the fused linear + cross-entropy's backward
    does): the product's 2·m·k·n; PyTorch's counter knows only the out-of-place ``addmm``."""
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


CPU_FORMULAS: dict[Any, Callable[..., int]] = {
    aten.addmm_: _addmm_inplace,
    torch.ops.mkldnn._linear_pointwise: _linear_pointwise,
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward,
    aten.mkldnn_rnn_layer: _lstm_cpu,
    aten.mkldnn_rnn_layer_backward: _lstm_cpu_backward,
}


def counter() -> flop_counter.FlopCounterMode:
    """A silent FLOP counter that also knows the fused CPU attention and LSTM kernels."""
    return flop_counter.FlopCounterMode(display=False, custom_mapping=CPU_FORMULAS)


def step_flops(model: torch.nn.Module, batches: Any, n: int = 3) -> float:
    """Mean FLOPs of one training step (forward + backward) over the first ``n`` training batches.

    batches: a :class:`~ptmkit.train.step.BatchSource` (``batches(epoch, step)``).  The batches
    are the ones training will see, so the count follows the real number of predictions per
    step (which varies with masking).  Gradients are cleared afterwards; the weights are not
    changed.  Dropout draws from the global RNG: call before seeding the run.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    was_training = model.training
    model.train()
    spe = int(batches.steps_per_epoch)
    total = 0
    try:
        for step in range(n):
            batch = batches(step // spe, step % spe)
            with counter() as fc:
                out = model(batch)
                out.loss.float().backward()
            total += fc.get_total_flops()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return total / n


def format_flops(x: float) -> str:
    """``3.2e13`` -> ``'32.0 TFLOP'``."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} FLOP"
