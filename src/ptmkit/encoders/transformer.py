"""The Transformer encoder (Vaswani et al. 2017) in the variants the BERT, GPT and LLaMA families use.

One config describes them all:

* BERT (Devlin et al. 2019): ``norm="post"``, ``activation="gelu"`` (exact erf),
  ``layer_norm_eps=1e-12``, ``embedding_norm=True``, ``type_vocab_size=2``, ``pooler=True``.
* GPT-2 (Radford et al. 2019): ``norm="pre"`` with a final LayerNorm, ``activation="gelu_tanh"``,
  ``layer_norm_eps=1e-5``, ``type_vocab_size=0``, ``scaled_residual_init=True``; its objective
  asks for causal attention (``forward(..., causal=True)``).
* ALBERT (Lan et al. 2020): ``embedding_size=128`` (factorized embeddings ``V x E`` then
  ``E -> H``) and ``sharing="all"`` (one set of layer weights used ``num_layers`` times), or
  ``"attention"`` / ``"ffn"`` to share only that sub-layer.
* ``positions="relative"``: no position embeddings; a learned bias per head and bucketed offset
  is added to the attention scores (T5), computed once and shared by all layers.
  ``positions="none"``: no position information at all (a bag of tokens, or causal attention alone).
* LLaMA (Touvron et al. 2023): ``norm="pre"``, ``norm_type="rmsnorm"`` (Zhang & Sennrich 2019),
  ``ffn="swiglu"`` (Shazeer 2020), ``positions="rope"`` (rotary, Su et al. 2021, base
  ``rope_theta``), ``bias=False``, ``embedding_norm=False``, ``type_vocab_size=0``, ``pooler=False``,
  causal attention; ``num_kv_heads < num_heads`` is grouped-query attention (Ainslie et al. 2023).
  ``positions="alibi"`` (Press et al. 2022): a fixed bias ``-m_h |i - j|`` per head on the scores,
  computed once like the relative one.  Each option combines with the others.

Incremental decoding: ``forward(..., causal=True, cache=KVCache)`` (:meth:`TransformerEncoder.forward_cached`)
runs only the new positions and reads the earlier ones' keys and values from the cache, so
generating a token costs one position per layer.  Without a cache, ``forward`` is unchanged.

Heads (:mod:`ptmkit.nn.heads`): ``output_attentions=True`` returns each layer's probabilities,
``head_mask [L, heads]`` gates them, :meth:`TransformerEncoder.prune_heads` cuts heads out of the
weights and records them in ``config.pruned_heads``; a relative position bias keeps every head and
each pruned layer reads its own heads' planes.  With ``sharing: all | attention`` (one attention
module for every layer) only the same heads in every layer can be pruned.
:meth:`TransformerEncoder.keep_layers` keeps a subset of the layers (a shallower encoder).

Padding: on a CPU, a batch whose ``attention_mask`` pads at least 5 % of the positions runs
packed (:mod:`ptmkit.nn.packing`): the layers' position-wise work covers the real tokens only, and
the padding positions of ``last_hidden_state`` and ``hidden_states`` hold zeros.  The attribute
``pack_padding = False`` runs every position instead.

LayerDrop (Fan et al. 2020): with ``layerdrop = p > 0`` (``config.layerdrop``, copied to the
attribute ``self.layerdrop`` so that fine-tuning can set it on a loaded encoder), each layer is
skipped in training with probability ``p``; a skipped layer passes its input on unchanged, so
``hidden_states`` repeats the previous state there and ``attentions`` holds ``None`` for it.  In
eval mode, and in incremental decoding, every layer runs.

Parameter names (fixed; the HF key maps rely on them): ``embeddings.word_embeddings.weight [V, E]``,
``embeddings.position_embeddings.weight [P, E]`` (absolute positions),
``embeddings.token_type_embeddings.weight [S, E]`` (``type_vocab_size > 0``), ``embeddings.norm.*``
(``embedding_norm``), ``embeddings.project.*`` (``E != H``), ``relative_bias.bias.weight [buckets, heads]``
(relative positions); per layer ``layers.{i}.attn.qkv.{weight [3H, H], bias}`` (q, k, v stacked;
``[(h + 2 g) d, H]`` with ``g = num_kv_heads``), ``layers.{i}.attn.out.*``, ``layers.{i}.attn_norm.*``,
``layers.{i}.ffn.fc1.*`` (SwiGLU's gate), ``layers.{i}.ffn.fc1_linear.*`` (SwiGLU's up projection),
``layers.{i}.ffn.fc2.*``, ``layers.{i}.ffn_norm.*``; ``final_norm.*`` (pre-LN), ``pooler.dense.*``
(``pooler``); ``bias=False`` leaves out every ``*.bias`` but the pooler's.  With sharing,
the shared tensors are stored once, under the first layer's name.  A layer left with ``h'`` heads
after pruning has ``attn.qkv.weight [3 h' d, H]`` and ``attn.out.weight [H, h' d]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.encoders.transformer_config import ACTIVATIONS, NORMS, POSITIONS, SHARING, TransformerConfig
from ptmkit.encoders.transformer_layers import Embeddings, Pooler, TransformerLayer, build_layers
from ptmkit.errors import PtmError
from ptmkit.nn.alibi import AlibiBias
from ptmkit.nn.heads import check_heads, head_gates, layer_number, merge_heads
from ptmkit.nn.kv_cache import KV, KVCache
from ptmkit.nn.masks import build_attention_mask, causal_mask
from ptmkit.nn.norms import make_norm
from ptmkit.nn.packing import Packing
from ptmkit.nn.positions import RelativePositionBias
from ptmkit.nn.projections import Projection, stack_projections
from ptmkit.nn.rotary import Rotary, rotary_angles
from ptmkit.registry import register

_LAYER_RE = re.compile(r"^layers\.(\d+)\.")


def check_kept_layers(layers: Sequence[int], num_layers: int) -> list[int]:
    """The layers to keep of ``num_layers``: existing indices, at least one, each once, increasing;
    :class:`PtmError` naming the problem otherwise."""
    given = list(layers)
    bad = [i for i in given if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < num_layers]
    if bad:
        raise PtmError(f"keep layers {given}: layer {bad[0]!r} does not exist; layers are numbered 0 .. {num_layers - 1}")
    if not given or any(b <= a for a, b in zip(given, given[1:])):
        raise PtmError(f"keep layers {given}: give at least one layer, each once, in increasing order "
                       f"(e.g. 0,2,4 of 0 .. {num_layers - 1})")
    return given


@register("encoder", "transformer")
class TransformerEncoder(Encoder):
    """Embeddings followed by ``num_layers`` Transformer layers (see the module docstring)."""

    name = "transformer"
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.embeddings = Embeddings(config)
        self.relative_bias = (
            RelativePositionBias(config.num_heads, config.relative_buckets, config.relative_max_distance)
            if config.positions == "relative" else None
        )
        self.alibi = AlibiBias(config.num_heads) if config.positions == "alibi" else None
        self.layers = build_layers(config)
        self.final_norm = (make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps, config.bias)
                           if config.norm == "pre" else None)
        self.pooler = Pooler(config.hidden_size) if config.pooler else None
        self.reset_parameters()
        self._cut_heads(config.pruned_heads)  # a pruned model's config rebuilds its smaller weights
        # an attribute, not only the config: fine-tuning sets it on an encoder loaded from a checkpoint
        self.layerdrop = float(config.layerdrop)
        # packed execution of padded batches (ptmkit.nn.packing); False runs every padding position
        self.pack_padding = True

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BERT / GPT-2 initialisation: weights ~ N(0, init_std), biases 0, norm gains 1.

        With ``scaled_residual_init`` (GPT-2) the projections that write into the residual
        stream (``attn.out``, ``ffn.fc2``) use ``init_std / sqrt(2 * num_layers)``, so the
        variance of the residual sum does not grow with depth.
        """
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                module.weight.fill_(1.0)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
        if self.config.scaled_residual_init:
            scaled = std / math.sqrt(2 * self.config.num_layers)
            for layer in self.layers:
                layer.attn.out.weight.normal_(0.0, scaled)
                layer.ffn.fc2.weight.normal_(0.0, scaled)

    # -- the Encoder contract ---------------------------------------------------------------
    def adapter_sites(self) -> list[nn.Module]:
        """Every layer's attention and feed-forward sub-layer (shared layers count once)."""
        sites: list[nn.Module] = []
        for layer in self.layers:
            for m in (layer.attn, layer.ffn):
                if all(m is not s for s in sites):
                    sites.append(m)
        return sites

    def projections(self) -> dict[str, Projection]:
        """``layers.{i}.attn.{q,k,v,o}`` (q, k, v: the blocks of the fused ``qkv``) and
        ``layers.{i}.ffn.{fc1,fc2}``; a shared sub-layer under its first layer's name."""
        return stack_projections({"": self.layers})

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def max_positions(self) -> int | None:
        """``max_position`` with learned absolute positions; relative or no positions: no limit."""
        return self.config.max_position if self.config.positions == "absolute" else None

    def prune_heads(self, heads: Mapping[int, Iterable[int]]) -> None:
        """Remove attention heads for good: ``{layer: [head, ...]}``, heads by their original
        index (already pruned ones are skipped).  Each layer's q/k/v rows and output columns of
        those heads go; ``config.pruned_heads`` records the union, so a saved model rebuilds with
        the smaller weights.  With shared attention (``sharing: all | attention``) the request must
        prune the same heads in every layer."""
        new = check_heads(heads, layer_number(self.config.num_layers, "prune_heads"), self.config.num_heads,
                          "prune_heads")
        if new and self.config.shares_attention and (len(new) != self.config.num_layers or len(set(new.values())) != 1):
            raise PtmError(
                f"prune_heads({dict(new)}): with model.sharing={self.config.sharing!r} all {self.config.num_layers} "
                f"layers share one attention module; give the same heads for each layer 0 .. {self.config.num_layers - 1}"
            )
        self._cut_heads(new)
        self.config = replace(self.config, pruned_heads=merge_heads(self.config.pruned_heads, new))

    def keep_layers(self, layers: Sequence[int]) -> None:
        """Keep only the layers ``layers`` (increasing indices), renumbered ``0 .. len(layers) - 1``:
        the encoder becomes the stack embeddings -> those layers -> final norm / pooler, computing
        exactly what running the kept layers in order by hand computes.  ``config.num_layers`` and
        the layers' ``pruned_heads`` follow the new numbering.  Shared layers (ALBERT) stay shared."""
        given = check_kept_layers(layers, len(self.layers))
        self.layers = nn.ModuleList([self.layers[i] for i in given])
        pruned = {new: self.config.pruned_heads[old] for new, old in enumerate(given) if old in self.config.pruned_heads}
        self.config = replace(self.config, num_layers=len(given), pruned_heads=pruned)

    def _cut_heads(self, heads: Mapping[int, Iterable[int]]) -> None:
        for i, layer_heads in heads.items():
            self.layers[i].attn.prune(layer_heads)  # a shared module is cut once: pruned heads are skipped

    @property
    def output_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def layer_index(self, name: str) -> int:
        if name.startswith("embeddings."):
            return 0
        match = _LAYER_RE.match(name)
        if match:
            return int(match.group(1)) + 1
        if name.startswith("relative_bias."):
            return 1  # used by every layer, computed with the first
        return self.num_layers + 1

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The embedding layer's output ``[B, T, H]`` (ELECTRA's generator shares it)."""
        return self.embeddings(input_ids, token_type_ids, position_ids)

    def visible_matrix_refusal(self) -> str | None:
        if self.config.positions != "absolute":
            return (f"soft positions need absolute position embeddings; this model's positions are "
                    f"{self.config.positions!r}")
        return None

    def _check_inputs(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None, start: int = 0) -> None:
        check_token_ids(input_ids, self.config.vocab_size)
        T = start + input_ids.shape[1]
        P = self.config.max_position
        if self.config.positions != "absolute":
            return
        if position_ids is None and T > P:
            raise PtmError(
                f"sequence length {T} is longer than the model's max_position {P}; "
                f"use seq_len <= {P} or a model with more positions"
            )
        if position_ids is not None and position_ids.numel() and int(position_ids.max()) >= P:
            raise PtmError(f"position id {int(position_ids.max())} >= the model's max_position {P}")

    @property
    def score_bias(self) -> RelativePositionBias | AlibiBias | None:
        """The additive attention bias by position (T5's relative buckets or ALiBi), if any."""
        return self.relative_bias if self.relative_bias is not None else self.alibi

    def _rotary(self, position_ids: torch.Tensor | None, t0: int, T: int, dtype: torch.dtype) -> Rotary | None:
        """RoPE's angles ``[B or 1, 1, T, d]`` for positions ``position_ids`` (default ``t0 .. t0 + T - 1``),
        computed once and shared by every layer; ``None`` without rotary positions."""
        if self.config.positions != "rope":
            return None
        if position_ids is None:
            position_ids = torch.arange(t0, t0 + T, device=self.embeddings.word_embeddings.weight.device)[None]
        return rotary_angles(position_ids, self.config.head_dim, self.config.rope_theta, dtype)

    def _mask(self, attention_mask, attn_mask, causal: bool, T: int, dtype: torch.dtype, device,
              position_ids: torch.Tensor | None = None) -> tuple[Any, bool]:
        mask, is_causal = build_attention_mask(attention_mask, attn_mask, causal, T, dtype)
        score_bias = self.score_bias
        if score_bias is None:
            return mask, is_causal
        bias = (score_bias(T, T, bidirectional=not causal, device=device) if position_ids is None  # [1, h, T, T]
                else score_bias.at(position_ids, bidirectional=not causal)).to(dtype)  # [B, h, T, T]
        if mask is None and is_causal:
            mask = causal_mask(T, device)[None, None]
        if mask is None:
            return bias, False
        if mask.dtype == torch.bool:
            return bias.masked_fill(~mask, torch.finfo(dtype).min), False
        return bias + mask, False

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        cache: KVCache | None = None,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """input_ids ``[B, T]``; attention_mask ``[B, T]`` (1 = token, 0 = padding);
        token_type_ids ``[B, T]``; position_ids ``[B or 1, T]`` (absolute: the embeddings' rows;
        relative: the offsets the bias reads); attn_mask ``[B|1, heads|1, T, T]`` (boolean, True = may
        attend; or additive float; overrides ``causal``); causal: each position attends only to itself
        and the positions before it.

        output_attentions: ``attentions`` = per layer the probabilities ``[B, heads, T, T]``
        (a pruned layer: its remaining heads); head_mask ``[num_layers, num_heads]`` or
        ``[num_heads]``: multiplies each head's probabilities (see :mod:`ptmkit.nn.heads`).

        cache: incremental causal decoding (see :meth:`forward_cached`); the extended cache is
        returned in ``extras["cache"]``."""
        if cache is not None:
            if not causal or attn_mask is not None:
                raise PtmError("a key/value cache needs causal=True and no attn_mask (it decodes left to right)")
            return self.forward_cached(input_ids, cache, attention_mask, token_type_ids, position_ids,
                                       output_hidden_states, output_attentions, head_mask)
        self._check_inputs(input_ids, position_ids)
        gates = head_gates(head_mask, self.config.num_layers, self.config.num_heads)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        rotary = self._rotary(position_ids, 0, input_ids.shape[1], x.dtype)
        mask, is_causal = self._mask(attention_mask, attn_mask, causal, input_ids.shape[1], x.dtype, x.device, position_ids)
        packing = Packing.of(attention_mask) if self.pack_padding else None
        if packing is not None:
            x = packing.pack(x)  # [N, H]: the layers skip the padding (ptmkit.nn.packing)
        hidden: list[torch.Tensor] | None = [x] if output_hidden_states else None
        probs: list[torch.Tensor] | None = [] if output_attentions else None
        skip = self.dropped_layers()
        for i, layer in enumerate(self.layers):
            if skip is not None and skip[i]:  # LayerDrop: the state passes the layer unchanged
                if probs is not None:
                    probs.append(None)
            else:
                x = layer(x, mask, is_causal, None if gates is None else gates[i], probs, packing, rotary)
            if hidden is not None:
                hidden.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden is not None:
                hidden[-1] = x
        if packing is not None:
            x, hidden = packing.pad_states(x, hidden)
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, tuple(hidden) if hidden is not None else None, pooled,
                             attentions=tuple(probs) if probs is not None else None)

    def dropped_layers(self) -> list[bool] | None:
        """LayerDrop (Fan et al. 2020): in training, which layers this forward pass skips, each with
        probability ``self.layerdrop`` (independently); ``None`` in eval mode or with ``layerdrop``
        0, when every layer runs and nothing is drawn.  The draw comes from PyTorch's CPU generator,
        whose state the Trainer saves, so a resumed run skips the layers the uninterrupted one would."""
        if not self.training or self.layerdrop <= 0:
            return None
        return (torch.rand(len(self.layers)) < self.layerdrop).tolist()

    def forward_cached(
        self,
        input_ids: torch.Tensor,
        cache: KVCache,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """Causal attention over the ``T`` new positions ``input_ids [B, T]`` that follow the
        ``t0 = cache.length`` cached ones: ``last_hidden_state [B, T, H]`` equals the last ``T``
        rows of ``forward(all t0 + T tokens, causal=True)``, at the cost of ``T`` positions.

        attention_mask ``[B, T]``: the new positions' padding (1 = token; left padding of a
        batch of prompts), remembered in the cache so later positions never attend to it.
        position_ids ``[B or 1, T]``: default ``t0 .. t0 + T - 1``; a left-padded row passes its
        own (the count of real tokens before each position), as it would have unpadded.
        ``extras["cache"]`` is a new :class:`KVCache` with ``t0 + T`` positions; output_attentions /
        head_mask as in :meth:`forward` (attentions ``[B, heads, T, t0 + T]``).
        """
        t0 = cache.length
        T = input_ids.shape[1]
        if self.config.positions in ("absolute", "rope") and position_ids is None and t0:
            position_ids = torch.arange(t0, t0 + T, device=input_ids.device)[None]
        self._check_inputs(input_ids, position_ids, start=0 if position_ids is not None else t0)
        if len(cache.kv) != len(self.layers):
            raise PtmError(f"the cache has {len(cache.kv)} layers, the model {len(self.layers)}")
        gates = head_gates(head_mask, self.config.num_layers, self.config.num_heads)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        rotary = self._rotary(position_ids, t0, T, x.dtype)
        key_mask = cache.key_mask
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            new = attention_mask.bool()
            old = key_mask if key_mask is not None else new.new_ones(new.shape[0], t0)
            key_mask = torch.cat([old, new], dim=1)  # [B, t0 + T]
        elif key_mask is not None:
            key_mask = torch.cat([key_mask, key_mask.new_ones(key_mask.shape[0], T)], dim=1)
        mask = None
        score_bias = self.score_bias
        if key_mask is not None or score_bias is not None:
            # query i (position t0 + i) sees keys j <= t0 + i that are real tokens
            allowed = torch.ones(T, t0 + T, dtype=torch.bool, device=x.device).tril(t0)[None, None]
            if key_mask is not None:
                allowed = allowed & key_mask[:, None, None, :]
                allowed = allowed | ~allowed.any(dim=-1, keepdim=True)  # a padded query attends to anything: no NaN
            mask = allowed
            if score_bias is not None:
                bias = score_bias(T, t0 + T, bidirectional=False, device=x.device, q_start=t0).to(x.dtype)
                mask = bias.masked_fill(~allowed, torch.finfo(x.dtype).min)
        hidden: list[torch.Tensor] | None = [x] if output_hidden_states else None
        kv: list[KV | None] = []
        probs: list[torch.Tensor] | None = [] if output_attentions else None
        slots = cache.slots()  # the new keys and values are written into each layer's store, not concatenated
        for i, (layer, slot) in enumerate(zip(self.layers, slots)):
            x, layer_kv = layer.forward_cached(x, mask, slot, None if gates is None else gates[i], probs, rotary)
            kv.append(layer_kv)
            if hidden is not None:
                hidden.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden is not None:
                hidden[-1] = x
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, tuple(hidden) if hidden is not None else None, pooled,
                             {"cache": KVCache(kv, key_mask, [s.store for s in slots], cache.limit)},
                             tuple(probs) if probs is not None else None)

    def start_cache(self) -> KVCache:
        """An empty :class:`KVCache` for :meth:`forward_cached` (its stores never make room beyond
        the model's positions)."""
        return KVCache.empty(len(self.layers), self.max_positions())


__all__ = ["ACTIVATIONS", "NORMS", "POSITIONS", "SHARING", "Embeddings", "Pooler", "TransformerConfig", "TransformerEncoder",
           "TransformerLayer", "build_layers", "check_kept_layers"]
