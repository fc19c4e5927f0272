"""Running a text Transformer's layers over a sequence that is not only text.

VisualBERT feeds image regions beside the words into one stream; the captioning LM puts them in
front of the caption as a prefix.  Both need the layers of a
:class:`~ptmkit.encoders.transformer.TransformerEncoder` applied to embeddings they assembled, with
an attention pattern they chose: :func:`run_layers` is that, the same layers and final norm as the
encoder's own ``forward`` (without its packing of padded rows).
"""

from __future__ import annotations

import torch

from ptmkit.errors import PtmError


def run_layers(encoder: torch.nn.Module, x: torch.Tensor, allowed: torch.Tensor | None,
               output_hidden_states: bool = False) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """x ``[B, T, H]`` (embeddings); allowed ``[B, 1, T, T]`` bool (True = may attend) or ``None``
    (every position sees every other).  Returns the last states ``[B, T, H]`` (after the final norm of
    a pre-LN stack) and, when asked, the input then each layer's states."""
    layers = getattr(encoder, "layers", None)
    if layers is None:
        raise PtmError(f"a vision–language stream needs a Transformer text encoder, got {type(encoder).__name__}")
    positions = getattr(getattr(encoder, "config", None), "positions", None)
    if positions in ("rope", "alibi"):  # the layers are run here without the angles or biases they need
        raise PtmError(f"a vision–language stream runs the text layers without model.positions={positions!r}; "
                       f"use absolute positions")
    hidden = [x] if output_hidden_states else None
    for layer in layers:
        x = layer(x, allowed, False)
        if hidden is not None:
            hidden.append(x)
    final = getattr(encoder, "final_norm", None)
    if final is not None:
        x = final(x)
        if hidden is not None:
            hidden[-1] = x
    return x, hidden


def key_padding(mask: torch.Tensor, queries: int | None = None) -> torch.Tensor:
    """``mask [B, S]`` (1 = real) -> ``[B, 1, T, S]`` bool: every query may attend to the real keys."""
    keep = mask.bool()[:, None, None, :]
    return keep.expand(-1, 1, queries or mask.shape[1], -1)
