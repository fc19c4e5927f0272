"""Which encoder layers a task head reads: the top layer, ELMo's scalar mix of all of them, or one
chosen layer (layer-wise probing, Peters et al. 2018 §5.3; Tenney et al. 2019; Liu et al. 2019).

An encoder's ``hidden_states`` are ``num_layers + 1`` tensors ``[B, T, H]``: index 0 is the
embedding output (the token layer), index ``i`` the output of layer ``i``, index ``num_layers``
the top.  The ``mix`` setting is written

* ``"last"``: the top layer (``last_hidden_state``; the head may read BERT's [CLS] pooler);
* ``"scalar"``: :class:`~ptmkit.nn.scalar_mix.ScalarMix` over all of them;
* ``"layer:k"`` (or the integer ``k``): hidden state ``k`` alone; a negative ``k`` counts from
  the top (``-1`` = the top layer's state, read from ``hidden_states``).
"""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.scalar_mix import ScalarMix

MIXES = ("last", "scalar")
LAYER_PREFIX = "layer:"


def normalize_mix(value: object, allowed: tuple[str, ...] = MIXES) -> str:
    """The canonical spelling of a mix setting: one of ``allowed`` or ``"layer:k"``.

    Accepts an integer ``k`` (a config override ``mix=3`` arrives as one) and ``"layer:k"``;
    :class:`PtmError` naming the choices otherwise."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        return f"{LAYER_PREFIX}{value}"
    if isinstance(value, str):
        if value in allowed:
            return value
        if value.startswith(LAYER_PREFIX):
            try:
                return f"{LAYER_PREFIX}{int(value[len(LAYER_PREFIX):])}"
            except ValueError:
                pass
    raise PtmError(f"mix must be one of {', '.join(allowed)}, or layer:K / an integer K (one hidden state: "
                   f"0 = embeddings, negative counts from the top), got {value!r}")


def chosen_layer(mix: str) -> int | None:
    """``k`` of ``"layer:k"``; ``None`` for the other settings."""
    return int(mix[len(LAYER_PREFIX):]) if mix.startswith(LAYER_PREFIX) else None


class ChosenLayer(nn.Module):
    """``hidden_states`` (``num_states`` tensors ``[B, T, H]``) -> the one at ``index`` ``[B, T, H]``.

    ``index`` may be negative (from the top); an index outside ``-num_states .. num_states - 1``
    is refused here, when the head is built, with the valid range of this encoder."""

    def __init__(self, index: int, num_states: int) -> None:
        super().__init__()
        if not -num_states <= index < num_states:
            raise PtmError(
                f"mix=layer:{index} is outside this encoder's hidden states: give a layer in 0..{num_states - 1} "
                f"(0 = embeddings, {num_states - 1} = top) or -{num_states}..-1 (from the top)"
            )
        self.index = index % num_states  # the non-negative position, for reports
        self.num_states = num_states

    def forward(self, layers: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> torch.Tensor:
        if len(layers) != self.num_states:
            raise ValueError(f"ChosenLayer over {self.num_states} hidden states got {len(layers)}")
        return layers[self.index]

    def extra_repr(self) -> str:
        return f"index={self.index}, num_states={self.num_states}"


def build_mix(mix: str, backbone: nn.Module) -> nn.Module | None:
    """The module that turns ``backbone``'s ``hidden_states`` into the head's input, or ``None``
    for ``"last"`` (the head reads ``last_hidden_state`` and needs no hidden states)."""
    mix = normalize_mix(mix)
    num_states = backbone.num_layers + 1
    if mix == "last":
        return None
    if mix == "scalar":
        return ScalarMix(num_states)
    return ChosenLayer(chosen_layer(mix), num_states)
