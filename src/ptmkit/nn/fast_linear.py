"""Linear layers without autograd on CPU through oneDNN, with the activation applied as the
product is written.

PyTorch sends a float32 ``nn.Linear`` on CPU to MKL's GEMM.  On the AMD Zen 4 CPU this project is
measured on, oneDNN's (the library PyTorch already uses for bfloat16 products) took 10-15 % less
time at an encoder's ``[4096, 768] x [768, 3072]`` and about half at a decoding step's 8 rows
times GPT-2's ``[768, 50257]`` output layer, one thread; and it applies GELU or ReLU to the product
as it writes it, where a separate erf-GELU pass over BERT's ``[4096, 3072]`` activation took
about 30 % as long as its product (see ``docs/speed.md``).

Only where nothing needs a gradient (``torch.no_grad`` / ``torch.inference_mode``): a CPU tensor
of float32 or bfloat16 in a plain ``nn.Linear`` of the same dtype without hooks (and plain tensors,
not a quantized tensor subclass), outside autocast,
a tracer (ONNX export) and ``torch.compile``.  Everything else, training included, takes
``nn.Linear`` and the activation function as before, bit for bit.  oneDNN sums in another order
than MKL: outputs differ from the default route by float32 rounding (about 1e-6 relative).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
_DTYPES = (torch.float32, torch.bfloat16)
_PLAIN = (torch.Tensor, nn.Parameter)
# ptmkit's activation names -> oneDNN's post-op (name, scalars, algorithm)
POST_OPS = {None: ("none", [], ""), "gelu": ("gelu", [], "none"), "gelu_tanh": ("gelu", [], "tanh"),
            "relu": ("relu", [], "")}


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``x @ weight.T`` may take oneDNN's route (see the module docstring)."""
    if not _ONEDNN or torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.is_grad_enabled():
        return False  # the tracers first: the checks below would be recorded as constants
    return (type(weight) in _PLAIN and type(x) in _PLAIN  # not a tensor subclass (torchao's int8 weights)
            and x.device.type == "cpu" and x.dtype in _DTYPES and x.numel() > 0 and weight.dtype == x.dtype
            and weight.device.type == "cpu" and x.is_contiguous() and weight.is_contiguous()
            and not torch.is_autocast_enabled("cpu"))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, act: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """``act(x @ weight.T + bias)``: x ``[..., in]``, weight ``[out, in]``, bias ``[out]`` -> ``[..., out]``.
    ``activation`` names ``act`` (``gelu``, ``gelu_tanh``, ``relu``) so oneDNN can apply it itself;
    ``act`` is what the default route applies (none: the product alone)."""
    if activation in POST_OPS and applies(x, weight) and (bias is None or bias.dtype == x.dtype):
        name, scalars, algorithm = POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, name, scalars, algorithm)
    y = F.linear(x, weight, bias)
    return act(y) if act is not None else y


def project(layer: nn.Module, x: torch.Tensor, activation: str | None = None,
            act: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """``act(layer(x))`` for any projection module; a plain ``nn.Linear`` without hooks goes
    through :func:`linear` (a quantized or hooked module is called as it is)."""
    if type(layer) is nn.Linear and not (layer._forward_hooks or layer._forward_pre_hooks):
        return linear(x, layer.weight, layer.bias, activation, act)
    y = layer(x)
    return act(y) if act is not None else y


__all__ = ["POST_OPS", "applies", "linear", "project"]
