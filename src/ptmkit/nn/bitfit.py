"""BitFit (Ben Zaken et al. 2022): fine-tune only the bias terms of the encoder.

Every other encoder weight stays at its pre-trained value; the bias terms (of the attention's
query, key, value and output projections, of both feed-forward layers, of the layer norms and of
the pooler) and the task head learn: about 0.1 % of BERT-base's parameters.  A bias term is a
parameter named ``bias`` (or ``bias_*``: an LSTM's ``bias_ih_l0``); T5's relative position table
(``relative_bias.bias.weight``) is an embedding, not one.
"""

from __future__ import annotations

from torch import nn

from ptmkit.errors import PtmError


def bias_names(encoder: nn.Module) -> list[str]:
    """The names of ``encoder``'s bias terms (parameters whose own name is ``bias`` or ``bias_*``)."""
    leaf = lambda n: n.rsplit(".", 1)[-1]  # noqa: E731
    return [n for n, _ in encoder.named_parameters() if leaf(n) == "bias" or leaf(n).startswith("bias_")]


def freeze_for_bitfit(encoder: nn.Module) -> list[str]:
    """Freeze every parameter of ``encoder`` but its bias terms; returns their names.  An encoder
    without bias terms (``bias: false``, T5) is refused: BitFit would train nothing in it."""
    names = set(bias_names(encoder))
    if not names:
        raise PtmError(f"bitfit=true trains only the encoder's bias terms, and this {getattr(encoder, 'name', 'encoder')} "
                       f"encoder has none (built with bias=false, as T5): fine-tune it with lora_rank or adapter_size")
    for name, p in encoder.named_parameters():
        p.requires_grad_(name in names)
    return sorted(names)


__all__ = ["bias_names", "freeze_for_bitfit"]
