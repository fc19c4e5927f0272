"""Are a model's weights finite?  Checked before every checkpoint and before fine-tuning keeps a
dev-selected epoch, so that no saved weights hold a NaN or an infinity (a diverged run stops
with an error instead, keeping its last good checkpoint)."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.train import distributed as dist

# What to change when training diverges, in the keys of both configs the Trainer runs under.
ADVICE = ("lower the learning rate, warm up longer or clip gradients (pre-training: train.lr, train.warmup_steps, "
          "train.clip_norm; fine-tuning: lr, warmup, clip_norm)")


def nonfinite_parameter(model: nn.Module) -> str | None:
    """The name of the first floating-point parameter of ``model`` holding a NaN or an infinity,
    or ``None`` when all are finite.  One ``isfinite(p).all()`` reduction per parameter and a
    single device-to-host read for the lot (the name is looked up only on failure)."""
    # an FSDP parameter is checked on the shard this rank holds (``nonfinite_on_any_rank`` combines them)
    named = [(name, getattr(p, "to_local", lambda p=p: p)()) for name, p in model.named_parameters()
             if p.is_floating_point()]
    if not named:
        return None
    with torch.no_grad():
        flags = torch.stack([torch.isfinite(p).all() for _, p in named])  # bool [n_parameters]
        if bool(flags.all()):
            return None
        return named[int((~flags).nonzero()[0, 0])][0]


def nonfinite_on_any_rank(model: nn.Module, device: torch.device) -> str | None:
    """:func:`nonfinite_parameter` decided together by every rank under DDP: ``"a parameter on
    another rank"`` when only another rank's weights hold NaN or inf."""
    bad = nonfinite_parameter(model)
    if dist.is_distributed():
        flag = torch.tensor([0.0 if bad is None else 1.0], device=device if device.type == "cuda" else "cpu")
        if float(dist.all_reduce_sum(flag)) > 0 and bad is None:
            bad = "a parameter on another rank"
    return bad


__all__ = ["ADVICE", "nonfinite_on_any_rank", "nonfinite_parameter"]
