"""Activation functions by name (``TransformerConfig.activation``)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ptmkit.errors import PtmError, suggest
from ptmkit.nn.pointwise import gelu_tanh


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)  # exact: x * Phi(x), as BERT


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return gelu_tanh(x)  # GPT-2's "gelu_new"; F.gelu(x, approximate="tanh") off the CPU kernels' path


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,  # x * sigmoid(x) (Swish with beta 1): the gate of SwiGLU (Shazeer 2020)
}


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise PtmError(f"unknown activation {name!r}{suggest(name, ACTIVATIONS)}; known: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]
