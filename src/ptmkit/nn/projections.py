"""An encoder's linear projections by name, whatever module computes them: what LoRA (Hu et al.
2021) adapts.

Attention fuses projections for speed (``qkv``: query, key and value in one ``[3H, H]`` matmul;
cross-attention's ``kv``), so a projection is a block of output rows of an ``nn.Linear``: the
query of ``attn.qkv`` is ``rows 0 .. H`` of its output, the value ``2H .. 3H``.  Adapting ``q``
and ``v`` of a fused ``qkv`` must change those two blocks and leave the key's alone.

Names end in the projection's name from the Transformer paper: ``q``, ``k``, ``v``, ``o`` (the
attention output ``W_O``), and the feed-forward network's ``fc1`` (``fc1_linear``: the gated
variant's second input projection) and ``fc2``: ``layers.3.attn.q``, ``decoder.layers.0.cross_attn.v``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from torch import nn


@dataclass(frozen=True)
class Projection:
    """Rows ``rows`` of ``linear``'s output ``[..., out_features]``: the projection
    ``x [..., in_features] -> [..., rows.stop - rows.start]`` (weight ``linear.weight[rows]``)."""

    linear: nn.Linear
    rows: slice

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.rows.stop - self.rows.start


def fused(prefix: str, linear: nn.Linear, names: tuple[str, ...],
          sizes: tuple[int, ...] | None = None) -> dict[str, Projection]:
    """``linear``'s output split into ``len(names)`` blocks named ``prefix + name`` in order
    (``qkv``: ``("q", "k", "v")``; a pruned attention's blocks are ``h' d`` rows each): equal blocks,
    or blocks of ``sizes`` rows (grouped-query attention's smaller key and value blocks)."""
    if sizes is None:
        sizes = (linear.out_features // len(names),) * len(names)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return {prefix + n: Projection(linear, slice(a, a + size)) for n, a, size in zip(names, starts, sizes)}


def attention_projections(prefix: str, attn: nn.Module) -> dict[str, Projection]:
    """``q``, ``k``, ``v``, ``o`` of a self-attention (a fused ``qkv``) or a cross-attention
    (``q`` and a fused ``kv``), each as ``prefix + name``."""
    if hasattr(attn, "qkv"):
        out = fused(prefix, attn.qkv, ("q", "k", "v"), getattr(attn, "qkv_sizes", None))
    else:
        out = {**fused(prefix, attn.q, ("q",)), **fused(prefix, attn.kv, ("k", "v"))}
    return {**out, **fused(prefix, attn.out, ("o",))}


def ffn_projections(prefix: str, ffn: nn.Module) -> dict[str, Projection]:
    """``fc1`` (and the gated variant's ``fc1_linear``) and ``fc2`` of a feed-forward network."""
    out = fused(prefix, ffn.fc1, ("fc1",))
    if getattr(ffn, "fc1_linear", None) is not None:
        out.update(fused(prefix, ffn.fc1_linear, ("fc1_linear",)))
    return {**out, **fused(prefix, ffn.fc2, ("fc2",))}


def first_names(projections: dict[str, Projection]) -> dict[str, Projection]:
    """Each projection once, under its first name: shared layers (ALBERT) list one module under
    every layer's name, and adapting it twice would apply the update twice."""
    seen: set[tuple[int, int]] = set()
    out = {}
    for name, p in projections.items():
        key = (id(p.linear), p.rows.start)
        if key not in seen:
            seen.add(key)
            out[name] = p
    return out


__all__ = ["Projection", "attention_projections", "ffn_projections", "first_names", "fused"]


ATTENTIONS = ("attn", "self_attn", "cross_attn")  # the attention sub-layers a layer may have


def stack_projections(stacks: dict[str, Iterable[nn.Module]]) -> dict[str, Projection]:
    """Every layer's attention projections (``q``, ``k``, ``v``, ``o`` of each sub-layer in
    :data:`ATTENTIONS` it has) and ``ffn`` projections, named ``{stack}.layers.{i}.{sub}.{name}``
    (``layers.{i}...`` for the stack named ``""``); a shared module under its first name."""
    out: dict[str, Projection] = {}
    for stack, layers in stacks.items():
        for i, layer in enumerate(layers):
            prefix = f"{stack}.layers.{i}." if stack else f"layers.{i}."
            for sub in ATTENTIONS:
                if isinstance(getattr(layer, sub, None), nn.Module):
                    out.update(attention_projections(f"{prefix}{sub}.", getattr(layer, sub)))
            out.update(ffn_projections(prefix + "ffn.", layer.ffn))
    return first_names(out)
