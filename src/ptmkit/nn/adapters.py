"""Bottleneck adapters (Houlsby et al. 2019): parameter-efficient transfer with a frozen encoder.

After each attention and each feed-forward sub-layer (before its residual connection), an adapter
maps the output ``h [..., H]`` to ``h + W_up act(W_down h)`` with ``W_down: H -> m``, ``m << H``.
``W_up`` starts at zero, so a new adapter is the identity and fine-tuning starts from the
pre-trained function.  Only the adapters, the layer norms and the task head learn: about
``2 m H`` parameters per site.

Adapters attach through forward hooks on the encoder's declared sites
(:meth:`ptmkit.encoders.base.Encoder.adapter_sites`), so no encoder file changes to take them.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.errors import PtmError


class Adapter(nn.Module):
    """``h -> h + up(gelu(down(h)))``: ``down [m, H]``, ``up [H, m]`` (zero at the start)."""

    def __init__(self, hidden: int, size: int) -> None:
        super().__init__()
        self.down = nn.Linear(hidden, size)
        self.up = nn.Linear(size, hidden)
        nn.init.normal_(self.down.weight, std=1e-2)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.up(torch.nn.functional.gelu(self.down(h)))


def add_adapters(encoder: nn.Module, size: int) -> nn.ModuleList:
    """Attach one adapter of bottleneck ``size`` after every adapter site of ``encoder`` and
    return them (the caller registers the list as a child of its model, so they train and save)."""
    if size <= 0:
        raise PtmError(f"adapter_size must be a positive number of units, got {size}")
    adapters = nn.ModuleList()
    for site in encoder.adapter_sites():
        adapter = Adapter(encoder.output_size, size)
        site.register_forward_hook(lambda _m, _inp, out, a=adapter: a(out))
        adapters.append(adapter)
    return adapters


def freeze_for_adapters(backbone: nn.Module) -> None:
    """Freeze every backbone weight but the layer norms' (Houlsby et al. train those too)."""
    backbone.requires_grad_(False)
    for m in backbone.modules():
        if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
            m.requires_grad_(True)
