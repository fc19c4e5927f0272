"""Are a model's weights finite?  Checked before every checkpoint and before fine-tuning keeps a
dev-selected epoch, so that no saved weights hold a NaN or an infinity (a diverged run stops
with an error instead, keeping its last good checkpoint)."""

from __future__ import annotations

import torch
from torch import nn


def nonfinite_parameter(model: nn.Module) -> str | None:
    """The name of the first floating-point parameter of ``model`` holding a NaN or an infinity,
    or ``None`` when all are finite.  One ``isfinite(p).all()`` reduction per parameter and a
    single device-to-host read for the lot (the name is looked up only on failure)."""
    named = [(name, p) for name, p in model.named_parameters() if p.is_floating_point()]
    if not named:
        return None
    with torch.no_grad():
        flags = torch.stack([torch.isfinite(p).all() for _, p in named])  # bool [n_parameters]
        if bool(flags.all()):
            return None
        return named[int((~flags).nonzero()[0, 0])][0]


__all__ = ["nonfinite_parameter"]
