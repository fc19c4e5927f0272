"""Attention heads as units: head gates (HF's ``head_mask``) and physical head pruning.

A head gate ``ξ_h`` multiplies head ``h``'s attention probabilities (0 = the head is off, 1 =
unchanged); Michel et al. (2019) score a head's importance by ``|∂L/∂ξ_h|`` at ``ξ = 1``.  Pruning
removes a head's rows from the query / key / value projections and its columns from the output
projection, so the layer computes with smaller matrices; a pruned head equals a head gated to 0
(the output projection's bias stays).

Heads are always named by their index in the *unpruned* layer (``0 .. num_heads - 1``), before and
after any pruning: a head mask is ``[layers, num_heads]`` whatever was pruned (the entries of pruned
heads are ignored), and pruning a head twice is pruning it once.  :class:`PrunableHeads` keeps that
bookkeeping for an attention module.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from ptmkit.errors import PtmError


def head_gates(head_mask: torch.Tensor | None, num_layers: int, num_heads: int,
               name: str = "head_mask") -> list[torch.Tensor] | None:
    """Check a head mask and split it per layer: ``[num_layers, num_heads]``, or ``[num_heads]`` for
    the same gates in every layer -> ``num_layers`` tensors ``[num_heads]`` (views: gradients reach
    ``head_mask``), or ``None`` without a mask.  A non-float mask (bool, int) is read as 0/1 floats."""
    if head_mask is None:
        return None
    if not isinstance(head_mask, torch.Tensor):
        raise PtmError(f"{name} must be a tensor [{num_layers}, {num_heads}] (layers, heads), got {type(head_mask).__name__}")
    shape = tuple(head_mask.shape)
    if shape not in ((num_layers, num_heads), (num_heads,)):
        raise PtmError(
            f"{name} has shape {list(shape)}; expected [{num_layers}, {num_heads}] (layers, heads) or "
            f"[{num_heads}] (the same gates in every layer)"
        )
    if not head_mask.is_floating_point():
        head_mask = head_mask.float()
    if head_mask.dim() == 1:
        return [head_mask] * num_layers
    return list(head_mask.unbind(0))


def no_heads_error(encoder: str) -> PtmError:
    """The error of an encoder without attention (LSTMs, static vectors) asked for heads."""
    return PtmError(
        f"the {encoder} encoder has no attention heads: output_attentions, head_mask and prune_heads need an "
        f"attention encoder (transformer, encoder_decoder, xlnet)"
    )


def check_heads(value: Any, layers: Callable[[Any], Any], num_heads: int, name: str) -> dict[Any, tuple[int, ...]]:
    """Normalise a ``{layer: [head, ...]}`` mapping (from a call or a config file): ``layers(key)``
    turns a key into the canonical layer key or raises :class:`PtmError`; heads must lie in
    ``[0, num_heads)``.  Returns ``{layer: sorted unique heads}`` without empty entries."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PtmError(f"{name} must map layers to lists of heads, e.g. {{0: [1, 3]}}, got {value!r}")
    out: dict[Any, tuple[int, ...]] = {}
    for key, heads in value.items():
        layer = layers(key)
        if isinstance(heads, (int, str)) or not isinstance(heads, Iterable):
            raise PtmError(f"{name}[{key!r}] must be a list of head indices, got {heads!r}")
        heads = list(heads)
        for h in heads:
            if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < num_heads:
                raise PtmError(f"{name}[{key!r}] names head {h!r}; heads are numbered 0 .. {num_heads - 1}")
        if heads:
            out[layer] = tuple(sorted(set(heads) | set(out.get(layer, ()))))
    return dict(sorted(out.items(), key=lambda kv: _order(kv[0])))


def _order(key: Any) -> tuple:
    """Sort key of a layer key: ``2 < 10``, ``"encoder.2" < "encoder.10"``."""
    return tuple(int(p) if p.isdigit() else p for p in str(key).split("."))


def layer_number(num_layers: int, name: str) -> Callable[[Any], int]:
    """A ``layers`` function for :func:`check_heads`: an int (or its JSON string form) in
    ``[0, num_layers)``."""

    def parse(key: Any) -> int:
        layer = None
        if isinstance(key, int) and not isinstance(key, bool):
            layer = key
        elif isinstance(key, str) and key.strip().isdigit():  # JSON object keys are strings
            layer = int(key)
        if layer is None or not 0 <= layer < num_layers:
            raise PtmError(f"{name} names layer {key!r}; layers are numbered 0 .. {num_layers - 1}")
        return layer

    return parse


def merge_heads(old: Mapping[Any, Iterable[int]], new: Mapping[Any, Iterable[int]]) -> dict[Any, tuple[int, ...]]:
    """Union of two ``{layer: heads}`` mappings (both already normalised)."""
    out = {k: tuple(v) for k, v in old.items()}
    for k, v in new.items():
        out[k] = tuple(sorted(set(out.get(k, ())) | set(v)))
    return out


class PrunableHeads:
    """Head bookkeeping for an attention module (a mixin of ``nn.Module`` subclasses).

    ``total_heads``: heads before pruning; ``kept_heads``: the original indices of the heads left,
    in order (the module's head ``i`` is original head ``kept_heads[i]``); ``num_heads`` =
    ``len(kept_heads)``.  Subclasses implement :meth:`_keep` (cut their tensors to local heads)."""

    num_heads: int
    head_dim: int

    def _init_heads(self, num_heads: int) -> None:
        self.total_heads = num_heads
        self.kept_heads = list(range(num_heads))

    @property
    def pruned(self) -> bool:
        return len(self.kept_heads) < self.total_heads

    def prune(self, heads: Iterable[int]) -> None:
        """Remove the original heads ``heads`` (already pruned ones are skipped)."""
        drop = set(heads)
        local = [i for i, h in enumerate(self.kept_heads) if h not in drop]
        if len(local) == len(self.kept_heads):
            return
        self._keep(local)
        self.kept_heads = [self.kept_heads[i] for i in local]
        self.num_heads = len(self.kept_heads)

    def _keep(self, local: list[int]) -> None:
        raise NotImplementedError

    def rows(self, local: list[int], blocks: int, device: torch.device) -> torch.Tensor:
        """Row indices ``[blocks * len(local) * d]`` of the local heads ``local`` in a projection
        of ``blocks`` stacked blocks (q, k, v) of ``num_heads * d`` rows each."""
        d, n = self.head_dim, self.num_heads
        heads = torch.tensor(local, dtype=torch.long, device=device)
        per_block = (heads[:, None] * d + torch.arange(d, device=device)[None, :]).reshape(-1)
        return torch.cat([per_block + b * n * d for b in range(blocks)])

    def gate(self, head_gate: torch.Tensor | None) -> torch.Tensor | None:
        """A layer's gates over the original heads ``[total_heads]`` -> over the kept ones."""
        if head_gate is None or not self.pruned:
            return head_gate
        return head_gate[self.kept_heads]

    def head_slice(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """A mask ``[B|1, total_heads, T, S]`` with one plane per original head (relative position
        biases, a per-head ``attn_mask``) -> the kept heads' planes; other masks unchanged."""
        if mask is None or not self.pruned or mask.dim() != 4 or mask.shape[1] == 1:
            return mask
        return mask[:, self.kept_heads]


@torch.no_grad()
def keep_rows(linear: nn.Linear, index: torch.Tensor) -> None:
    """Keep the output rows ``index`` of ``linear`` (weight ``[out, in]``, bias ``[out]``), in place:
    the module object stays (hooks and sharing survive), its parameters become the smaller tensors."""
    linear.weight = nn.Parameter(linear.weight.index_select(0, index).clone(), linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.index_select(0, index).clone(), linear.bias.requires_grad)
    linear.out_features = int(index.numel())


@torch.no_grad()
def keep_columns(linear: nn.Linear, index: torch.Tensor) -> None:
    """Keep the input columns ``index`` of ``linear`` in place (its bias is unchanged)."""
    linear.weight = nn.Parameter(linear.weight.index_select(1, index).clone(), linear.weight.requires_grad)
    linear.in_features = int(index.numel())


@torch.no_grad()
def keep_parameter_heads(param: nn.Parameter, index: list[int], dim: int) -> nn.Parameter:
    """A per-head parameter (e.g. XLNet's ``r_w_bias [heads, d]``) cut to the local heads ``index``
    along ``dim``."""
    cut = param.index_select(dim, torch.tensor(index, dtype=torch.long, device=param.device)).clone()
    return nn.Parameter(cut, param.requires_grad)
