"""The Transformer encoder–decoder (Vaswani et al. 2017) as BART uses it (Lewis et al. 2020).

Shapes: ``B`` examples, ``S`` source (encoder) positions, ``T`` target (decoder) positions,
``H`` hidden size, ``V`` vocabulary, ``h`` heads of size ``d = H / h``.

* One token embedding table ``E [V, H]`` is shared by the encoder, the decoder and the output
  projection (the tied LM head); with ``scale_embedding`` token embeddings are multiplied by
  ``sqrt(H)`` (BART-large does not, the original Transformer does).
* Learned absolute positions, one table for the encoder and one for the decoder, each
  ``[max_position + 2, H]``: position ``t`` reads row ``t + 2``.  fairseq reserved the first two
  rows; HF BART keeps that offset, and so does ptmkit so the tables map one-to-one.  Decoder
  inputs are numbered ``0 .. T - 1`` unless ``decoder_position_ids [B, T]`` places them elsewhere
  (MASS feeds a masked span at its positions in the sentence).
* ``embedding_norm``: a LayerNorm over the sum (BART's ``layernorm_embedding``), then dropout.
* Encoder: ``encoder_layers`` post-LN blocks, ``x = LN(x + drop(SelfAttn(x)))``,
  ``x = LN(x + drop(FFN(x)))``.
* Decoder: ``decoder_layers`` post-LN blocks: causal self-attention, cross-attention whose keys and
  values are the encoder's last states, FFN; ``FFN(x) = fc2(drop_act(act(fc1(x))))``.
* Logits ``= y E^T + final_logits_bias``; the bias is a ``[V]`` buffer (zeros in BART, never trained,
  kept because BART checkpoints carry it).

T5 (Raffel et al. 2020) is a configuration of the same encoder (``presets/t5-*.yaml``); each switch
defaults to BART's behaviour:

* ``norm="pre"``: pre-LN blocks, ``x = x + drop(SubLayer(LN(x)))``, and a final LayerNorm + dropout
  on each stack (``{encoder,decoder}.final_norm``; each half's last hidden state is the output after
  it, as HF T5 reports); ``norm_type="rms"``: T5's RMS norm, ``x / sqrt(mean(x^2) + eps) * g`` (no
  mean subtraction, no bias; ``torch.nn.RMSNorm``).
* ``bias=false``: no biases in any attention or FFN projection.
* ``positions="relative"``: no position tables; each stack owns one learned bias per head and
  bucketed offset (:class:`ptmkit.nn.positions.RelativePositionBias`, ``relative_buckets``,
  ``relative_max_distance``), bidirectional in the encoder and causal in the decoder, computed once
  per forward pass and added to every self-attention layer's scores (cross-attention has none).
* ``scale_attention=false``: scores ``q . k`` without the ``1/sqrt(d)`` factor (T5 folds it into
  ``init="t5"``: ``W_q ~ N(0, (H d)^-1/2)``, ``W_k, W_v ~ N(0, H^-1/2)``, ``W_o ~ N(0, H^-1/2)``,
  FFN in ``N(0, H^-1/2)``, out ``N(0, I^-1/2)``, embeddings ``N(0, 1)``, relative bias ``N(0, H^-1/2)``).
* ``gated_ffn``: ``fc2(act(fc1(x)) * fc1_linear(x))`` (T5 v1.1's gated-GELU with ``gelu_tanh``);
  T5 v1.0 is the plain ReLU FFN.
* ``scale_decoder_output``: the decoder output is multiplied by ``H^-1/2`` before the tied output
  projection (T5 with tied embeddings), in :meth:`EncoderDecoder.lm_input`.

Attention is :func:`ptmkit.nn.attention.attend` (SDPA; with dropout on CPU, the product written
out around :mod:`ptmkit.nn.dropout`'s fast mask); padding masks go through
:func:`ptmkit.nn.masks.build_attention_mask`, which never leaves a query row with nothing to
attend to (no NaN from fully padded rows).  On a CPU the encoder runs a source batch whose
``attention_mask`` pads at least 5 % of the positions packed (:mod:`ptmkit.nn.packing`: the layers
skip the padding, whose encoder states are then zeros), and the decoder does the same with its
``decoder_attention_mask`` (training; the task and the objectives pass it, from the labels:
:func:`target_mask`); ``pack_padding = False`` turns both off.

:meth:`EncoderDecoder.forward` follows the :class:`~ptmkit.encoders.base.Encoder` contract.  Its
``last_hidden_state`` is the *decoder's* output ``[B, T, H]``; ``extras["encoder_last_hidden_state"]``
is the encoder's ``[B, S, H]``.  Without ``decoder_input_ids`` (downstream use as a plain encoder)
the decoder reads the input shifted right (``[start] x_0 .. x_{S-2}``), as HF ``BartModel`` does and
as the paper feeds classification inputs to both halves; ``pooled`` is then the decoder state at the
last real position (BART's sentence representation for classification).  ``hidden_states`` is the
encoder's embedding output, every encoder layer, then every decoder layer (``num_layers + 1``
tensors, matching ``layer_index``); ``extras["encoder_hidden_states"]`` and
``extras["decoder_hidden_states"]`` hold each half with its own embedding output first, as HF does.
With ``output_attentions`` the probabilities follow the same order (``attentions``: encoder then
decoder self-attention) and HF's split (``extras["encoder_attentions"]``, ``["decoder_attentions"]``,
``["cross_attentions"]``); ``head_mask``, ``decoder_head_mask`` and ``cross_attn_head_mask`` gate the
three kinds of attention, and :meth:`EncoderDecoder.prune_heads` names them ``"encoder.i"``,
``"decoder.j"`` and ``"cross.j"`` (:mod:`ptmkit.nn.heads`).

Generation uses :meth:`EncoderDecoder.encode` once and :meth:`EncoderDecoder.decode` per step with a
:class:`DecoderCache` (every layer's self-attention keys/values so far, cross-attention keys/values
computed once), so each step runs the decoder on the new token only.

Parameter names (the HF key map relies on them): ``word_embeddings.weight [V, H]``;
``encoder.position_embeddings.weight [P + 2, H]``, ``encoder.embedding_norm.*``,
``encoder.layers.{i}.attn.qkv.{weight [3H, H], bias}`` (q, k, v stacked), ``encoder.layers.{i}.attn.out.*``,
``encoder.layers.{i}.attn_norm.*``, ``encoder.layers.{i}.ffn.fc1.*``, ``encoder.layers.{i}.ffn.fc2.*``,
``encoder.layers.{i}.ffn_norm.*``; ``decoder.position_embeddings.weight``, ``decoder.embedding_norm.*``,
``decoder.layers.{j}.self_attn.{qkv,out}.*``, ``decoder.layers.{j}.self_attn_norm.*``,
``decoder.layers.{j}.cross_attn.q.{weight [H, H], bias}``, ``decoder.layers.{j}.cross_attn.kv.{weight [2H, H], bias}``
(k, v stacked), ``decoder.layers.{j}.cross_attn.out.*``, ``decoder.layers.{j}.cross_attn_norm.*``,
``decoder.layers.{j}.ffn.*``, ``decoder.layers.{j}.ffn_norm.*``; buffer ``final_logits_bias [V]``.
With the T5 options: ``{encoder,decoder}.relative_bias.bias.weight [buckets, h]`` instead of the position
tables, ``{encoder,decoder}.final_norm.weight``, ``....ffn.fc1_linear.weight`` (gated), no ``bias`` tensors.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.encoders.encoder_decoder_config import (
    KV,
    EncoderDecoderConfig,
)
from ptmkit.encoders.encoder_decoder_layers import (
    CrossAttention,
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    _Stack,
)
from ptmkit.errors import PtmError
from ptmkit.nn.attention import MultiHeadSelfAttention
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.heads import PrunableHeads, check_heads, head_gates, merge_heads
from ptmkit.nn.masks import build_attention_mask
from ptmkit.nn.packing import Packing
from ptmkit.nn.positions import RelativePositionBias
from ptmkit.nn.projections import Projection, stack_projections
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.registry import register

_ENC_RE = re.compile(r"^encoder\.layers\.(\d+)\.")
_DEC_RE = re.compile(r"^decoder\.layers\.(\d+)\.")
_EMBEDDING_PREFIXES = ("word_embeddings.", "encoder.position_embeddings.", "encoder.embedding_norm.",
                       "decoder.position_embeddings.", "decoder.embedding_norm.")


@register("encoder", "encoder_decoder")
class EncoderDecoder(Encoder):
    """Transformer encoder + decoder with cross-attention and a tied LM head (see the module docstring)."""

    name = "encoder_decoder"
    config_class = EncoderDecoderConfig

    def __init__(self, config: EncoderDecoderConfig) -> None:
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.encoder = _Stack(config, EncoderLayer, config.encoder_layers, bidirectional=True)
        self.decoder = _Stack(config, DecoderLayer, config.decoder_layers, bidirectional=False)
        self.register_buffer("final_logits_bias", torch.zeros(config.vocab_size))
        self.reset_parameters()
        self._cut_heads(config.pruned_heads)  # a pruned model's config rebuilds its smaller weights
        # packed execution of padded sources in the encoder (ptmkit.nn.packing); False runs every position
        self.pack_padding = True

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BART's initialisation: weights ~ N(0, init_std), biases 0, LayerNorm gain 1, the
        padding token's embedding 0, ``final_logits_bias`` 0.  ``init="t5"``: T5's (module
        docstring), which stands in for the ``1/sqrt(d)`` the unscaled attention leaves out."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, nn.RMSNorm):
                module.weight.fill_(1.0)
        if self.config.init == "t5":
            self._t5_init()
        self.word_embeddings.weight[self.config.pad_token_id].zero_()
        self.final_logits_bias.zero_()

    @torch.no_grad()
    def _t5_init(self) -> None:
        """T5's fan-in scaled normal init (Mesh TensorFlow's, as HF ``T5PreTrainedModel`` does it)."""
        cfg = self.config
        H, d, I = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
        self.word_embeddings.weight.normal_(0.0, 1.0)
        for module in self.modules():
            if isinstance(module, MultiHeadSelfAttention):
                q_rows = module.qkv.weight.shape[0] // 3  # H, or h' d once pruned
                module.qkv.weight[:q_rows].normal_(0.0, (H * d) ** -0.5)  # q: the 1/sqrt(d) folded in
                module.qkv.weight[q_rows:].normal_(0.0, H ** -0.5)
                module.out.weight.normal_(0.0, H ** -0.5)
            elif isinstance(module, CrossAttention):
                module.q.weight.normal_(0.0, (H * d) ** -0.5)
                module.kv.weight.normal_(0.0, H ** -0.5)
                module.out.weight.normal_(0.0, H ** -0.5)
            elif isinstance(module, FeedForward):
                module.fc1.weight.normal_(0.0, H ** -0.5)
                if module.fc1_linear is not None:
                    module.fc1_linear.weight.normal_(0.0, H ** -0.5)
                module.fc2.weight.normal_(0.0, I ** -0.5)
            elif isinstance(module, RelativePositionBias):
                module.bias.weight.normal_(0.0, H ** -0.5)

    # -- the Encoder contract ---------------------------------------------------------------
    def input_embeddings(self) -> nn.Embedding:
        return self.word_embeddings

    def projections(self) -> dict[str, Projection]:
        """``{encoder,decoder}.layers.{i}.{attn,self_attn,cross_attn}.{q,k,v,o}`` and ``...ffn.{fc1,fc2}``."""
        return stack_projections({"encoder": self.encoder.layers, "decoder": self.decoder.layers})

    def max_positions(self) -> int:
        """``max_position`` per side, with relative positions too (the model's stated limit, which
        :meth:`encode` and :meth:`decode` enforce)."""
        return self.config.max_position

    def prune_heads(self, heads: Mapping[Any, Iterable[int]]) -> None:
        """Remove attention heads for good.  Keys name an attention: ``"encoder.i"`` (encoder layer
        ``i``'s self-attention; a bare int ``i`` is the same, as in HF), ``"decoder.j"`` (decoder
        layer ``j``'s self-attention), ``"cross.j"`` (its cross-attention); values: heads by their
        original index.  ``config.pruned_heads`` records the union (see :meth:`TransformerEncoder.prune_heads`)."""
        new = check_heads(heads, self.config.attention_key("prune_heads"), self.config.num_heads, "prune_heads")
        self._cut_heads(new)
        self.config = replace(self.config, pruned_heads=merge_heads(self.config.pruned_heads, new))

    def _attention(self, key: str) -> PrunableHeads:
        kind, _, index = key.partition(".")
        if kind == "encoder":
            return self.encoder.layers[int(index)].attn
        layer = self.decoder.layers[int(index)]
        return layer.self_attn if kind == "decoder" else layer.cross_attn

    def _cut_heads(self, heads: Mapping[str, Iterable[int]]) -> None:
        for key, layer_heads in heads.items():
            self._attention(key).prune(layer_heads)

    def output_bias(self) -> torch.Tensor:
        """The LM head's bias ``[V]`` (BART's ``final_logits_bias`` buffer)."""
        return self.final_logits_bias

    @property
    def output_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_layers(self) -> int:
        """Encoder layers + decoder layers: depth runs embeddings (0), encoder layers
        (``1 .. L_enc``), decoder layers (``L_enc + 1 .. L_enc + L_dec``)."""
        return self.config.num_layers

    def layer_index(self, name: str) -> int:
        if name.startswith(_EMBEDDING_PREFIXES):
            return 0
        # each stack's relative bias serves every layer; it is counted with the first, as T5 stores it
        if name.startswith("encoder.relative_bias."):
            return 1
        if name.startswith("decoder.relative_bias."):
            return self.config.encoder_layers + 1
        if name.startswith("encoder.final_norm."):
            return self.config.encoder_layers
        if name.startswith("decoder.final_norm."):
            return self.num_layers
        match = _ENC_RE.match(name)
        if match:
            return int(match.group(1)) + 1
        match = _DEC_RE.match(name)
        if match:
            return self.config.encoder_layers + int(match.group(1)) + 1
        return self.num_layers + 1

    # -- pieces -----------------------------------------------------------------------------
    def lm_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder states ``[..., H]`` -> the input of the tied output projection: unchanged, or
        ``* H^-1/2`` with ``scale_decoder_output`` (T5)."""
        return hidden * self.config.hidden_size ** -0.5 if self.config.scale_decoder_output else hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder states ``[..., H]`` -> vocabulary logits ``[..., V]`` (tied, plus ``final_logits_bias``)."""
        return F.linear(self.lm_input(hidden), self.word_embeddings.weight, self.final_logits_bias)

    def shift_right(self, ids: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` -> ``[B, T]``: ``decoder_start_token_id`` then ``ids[:, :-1]`` (-100 becomes
        padding): the decoder's teacher-forcing input for targets ``ids``."""
        out = ids.new_full(ids.shape, self.config.decoder_start_token_id)
        out[:, 1:] = ids[:, :-1]
        return out.masked_fill_(out == IGNORE_INDEX, self.config.pad_token_id)

    def _tokens(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(ids)
        return x * self.embed_scale if self.embed_scale != 1.0 else x

    def _check(self, ids: torch.Tensor, what: str, start: int = 0) -> None:
        check_token_ids(ids, self.config.vocab_size)
        end = start + ids.shape[1]
        if end > self.config.max_position:  # relative positions have no table, but the limit stays the model's
            raise PtmError(
                f"{what} reach position {end}, beyond the model's max_position {self.config.max_position}; "
                f"use shorter sequences or a model with more positions"
            )

    def _check_positions(self, position_ids: torch.Tensor, shape: torch.Size) -> None:
        if self.config.positions != "absolute":
            raise PtmError(
                f"decoder position ids need learned absolute positions, and this model has "
                f"model.positions={self.config.positions!r}; decode without them, or use model.positions=absolute"
            )
        if tuple(position_ids.shape) != tuple(shape):
            raise PtmError(f"decoder position ids have shape {tuple(position_ids.shape)}, the decoder inputs "
                           f"{tuple(shape)}; give one position per decoder input")
        if position_ids.numel() and (int(position_ids.min()) < 0 or int(position_ids.max()) >= self.config.max_position):
            raise PtmError(
                f"decoder position ids must lie in [0, {self.config.max_position}) (model.max_position), got "
                f"{int(position_ids.min())} .. {int(position_ids.max())}"
            )

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """The encoder alone: input_ids ``[B, S]``, attention_mask ``[B, S]`` (1 = token) ->
        ``last_hidden_state [B, S, H]`` (and the embedding output + every layer's states);
        output_attentions: ``attentions`` per layer ``[B, h, S, S]``; head_mask
        ``[encoder_layers, num_heads]`` or ``[num_heads]``."""
        self._check(input_ids, "input_ids")
        gates = head_gates(head_mask, self.config.encoder_layers, self.config.num_heads, "head_mask")
        x = self.encoder.embed(self._tokens(input_ids))
        S = input_ids.shape[1]
        mask, is_causal = build_attention_mask(attention_mask, attn_mask, causal, S, x.dtype)
        mask, is_causal = self.encoder.position_mask(mask, is_causal, S, S, x.dtype)
        packing = Packing.of(attention_mask) if self.pack_padding else None
        if packing is not None:
            x = packing.pack(x)  # [N, H]: the layers skip the padding (ptmkit.nn.packing)
        hidden = [x] if output_hidden_states else None
        probs: list[torch.Tensor] | None = [] if output_attentions else None
        for i, layer in enumerate(self.encoder.layers):
            x = layer(x, mask, is_causal, None if gates is None else gates[i], probs, packing)
            if hidden is not None:
                hidden.append(x)
        x = self.encoder.finish(x)
        if hidden is not None and self.encoder.final_norm is not None:
            hidden[-1] = x  # pre-LN: the stack's normalised output stands for its last layer
        if packing is not None:
            x, hidden = packing.pad_states(x, hidden)
        return EncoderOutput(x, tuple(hidden) if hidden is not None else None,
                             attentions=tuple(probs) if probs is not None else None)

    def start_cache(self, encoder_hidden_states: torch.Tensor,
                    encoder_attention_mask: torch.Tensor | None = None) -> DecoderCache:
        """An empty :class:`DecoderCache` over the encoder states ``[B, S, H]`` (cross-attention keys
        and values projected once for every layer)."""
        cross_mask, _ = build_attention_mask(encoder_attention_mask, None, False, encoder_hidden_states.shape[1],
                                             encoder_hidden_states.dtype)
        cross_kv = [layer.cross_attn.project_memory(encoder_hidden_states) for layer in self.decoder.layers]
        return DecoderCache([None] * len(cross_kv), cross_kv, cross_mask)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
        output_hidden_states: bool = False,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """The decoder: decoder_input_ids ``[B, T]`` over encoder states ``[B, S, H]`` with source
        padding mask ``[B, S]`` -> ``last_hidden_state [B, T, H]``.

        position_ids ``[B, T]``: the positions whose embeddings the inputs receive; ``None`` (BART)
        numbers them ``0 .. T - 1``, or on from the cached length.  Attention order is the order of
        the inputs whatever their position ids (causal over the sequence as given; with a cache,
        every cached input precedes the new ones).

        decoder_attention_mask ``[B, T]`` hides padded decoder inputs (with right padding and causal
        attention it changes nothing at the real positions) and, without a cache, lets the decoder
        run packed (module docstring; the padded positions' states are then zeros).  With
        ``cache`` (from :meth:`start_cache`, or a previous call's ``extras["cache"]``) the inputs are
        the next ``T`` positions after those cached; the encoder states are then taken from the
        cache, and the extended cache is returned in ``extras["cache"]``.

        output_attentions: ``attentions`` = the decoder's self-attention probabilities per layer
        ``[B, h, T, t0 + T]``, ``extras["cross_attentions"]`` the cross-attention's ``[B, h, T, S]``;
        head_mask / cross_attn_head_mask ``[decoder_layers, num_heads]`` (or ``[num_heads]``): the
        self- and cross-attention head gates.
        """
        start = cache.length if cache is not None else 0
        L = self.config.decoder_layers
        self_gates = head_gates(head_mask, L, self.config.num_heads, "decoder_head_mask")
        cross_gates = head_gates(cross_attn_head_mask, L, self.config.num_heads, "cross_attn_head_mask")
        if position_ids is None:
            self._check(decoder_input_ids, "decoder_input_ids", start)
        else:
            self._check(decoder_input_ids, "decoder_input_ids")
            self._check_positions(position_ids, decoder_input_ids.shape)
        if cache is None:
            if encoder_hidden_states is None:
                raise PtmError("decode needs encoder_hidden_states (or a cache made by start_cache)")
            cross_mask, _ = build_attention_mask(encoder_attention_mask, None, False, encoder_hidden_states.shape[1],
                                                 encoder_hidden_states.dtype)
            cross_kv = [layer.cross_attn.project_memory(encoder_hidden_states) for layer in self.decoder.layers]
        else:
            cross_mask, cross_kv = cache.cross_mask, cache.cross_kv
        y = self.decoder.embed(self._tokens(decoder_input_ids), start, position_ids)
        self_mask, is_causal = None, True
        T = decoder_input_ids.shape[1]
        if cache is None:
            self_mask, is_causal = build_attention_mask(decoder_attention_mask, None, True, T, y.dtype)
            self_mask, is_causal = self.decoder.position_mask(self_mask, is_causal, T, T, y.dtype)
        elif decoder_attention_mask is not None:
            raise PtmError("decoder_attention_mask is not supported with a cache (decode left-aligned sequences)")
        elif self.decoder.relative_bias is not None:  # positions start .. start + T - 1 over keys 0 .. start + T - 1
            self_mask, _ = self.decoder.position_mask(None, True, T, start + T, y.dtype, q_start=start)
        # padded targets run packed like padded sources (training; the cache decodes every row)
        packing = Packing.of(decoder_attention_mask) if self.pack_padding and cache is None else None
        if packing is not None:
            y = packing.pack(y)  # [N, H]
        hidden = [y] if output_hidden_states else None
        self_probs: list[torch.Tensor] | None = [] if output_attentions else None
        cross_probs: list[torch.Tensor] | None = [] if output_attentions else None
        new_kv: list[KV | None] = []
        for i, layer in enumerate(self.decoder.layers):
            past = cache.self_kv[i] if cache is not None else None
            y, kv = layer(y, self_mask, is_causal, cross_kv[i], cross_mask, past, cache is not None,
                          None if self_gates is None else self_gates[i], None if cross_gates is None else cross_gates[i],
                          self_probs, cross_probs, packing)
            new_kv.append(kv)
            if hidden is not None:
                hidden.append(y)
        y = self.decoder.finish(y)
        if hidden is not None and self.decoder.final_norm is not None:
            hidden[-1] = y
        if packing is not None:
            y, hidden = packing.pad_states(y, hidden)
        extras: dict[str, Any] = {}
        if cache is not None:
            extras["cache"] = DecoderCache(new_kv, cross_kv, cross_mask)
        if cross_probs is not None:
            extras["cross_attentions"] = tuple(cross_probs)
        return EncoderOutput(y, tuple(hidden) if hidden is not None else None, None, extras,
                             tuple(self_probs) if self_probs is not None else None)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        decoder_position_ids: torch.Tensor | None = None,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
        decoder_head_mask: torch.Tensor | None = None,
        cross_attn_head_mask: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """Encoder then decoder (see the module docstring for the outputs).

        input_ids / attention_mask ``[B, S]``: the source; decoder_input_ids /
        decoder_attention_mask ``[B, T]``: the decoder's inputs (default: ``shift_right(input_ids)``,
        with the source's padding); token_type_ids: accepted for the task heads' sake and ignored
        (BART has no segment embeddings); attn_mask / causal: the *encoder's* self-attention
        pattern (the decoder is always causal); decoder_position_ids ``[B, T]``: the decoder inputs'
        positions (default ``0 .. T - 1``; see :meth:`decode`).

        Heads (HF's names): head_mask ``[encoder_layers, num_heads]`` gates the encoder's
        self-attention, decoder_head_mask ``[decoder_layers, num_heads]`` the decoder's,
        cross_attn_head_mask ``[decoder_layers, num_heads]`` the cross-attention (each also
        ``[num_heads]`` for every layer).  output_attentions: ``attentions`` = the encoder's
        then the decoder's self-attention probabilities (``num_layers`` tensors, in
        :meth:`layer_index` order, like ``hidden_states``), and by half, as HF names them,
        ``extras["encoder_attentions"]`` (``[B, h, S, S]`` each), ``extras["decoder_attentions"]``
        (``[B, h, T, T]``) and ``extras["cross_attentions"]`` (``[B, h, T, S]``).
        """
        del token_type_ids
        enc = self.encode(input_ids, attention_mask, attn_mask, causal, output_hidden_states, output_attentions,
                          head_mask)
        derived = decoder_input_ids is None
        if derived:
            decoder_input_ids = self.shift_right(input_ids)
            # the source's right padding, shifted by one, pads the same decoder positions: it changes
            # nothing at the real ones (causal attention) and lets the decoder run packed
            decoder_attention_mask = attention_mask
        dec = self.decode(decoder_input_ids, enc.last_hidden_state, attention_mask, decoder_attention_mask,
                          output_hidden_states=output_hidden_states, position_ids=decoder_position_ids,
                          output_attentions=output_attentions, head_mask=decoder_head_mask,
                          cross_attn_head_mask=cross_attn_head_mask)
        y = dec.last_hidden_state
        length_mask = attention_mask if derived else decoder_attention_mask
        if length_mask is not None:
            last = length_mask.long().sum(dim=1).clamp(min=1) - 1  # [B] last real position (right padding)
        else:
            last = torch.full((y.shape[0],), y.shape[1] - 1, dtype=torch.long, device=y.device)
        pooled = y[torch.arange(y.shape[0], device=y.device), last]  # [B, H]
        extras: dict[str, Any] = {"encoder_last_hidden_state": enc.last_hidden_state}
        hidden_states = None
        if output_hidden_states:
            extras["encoder_hidden_states"] = enc.hidden_states
            extras["decoder_hidden_states"] = dec.hidden_states
            hidden_states = tuple(enc.hidden_states) + tuple(dec.hidden_states[1:])
        attentions = None
        if output_attentions:
            extras["encoder_attentions"] = enc.attentions
            extras["decoder_attentions"] = dec.attentions
            extras["cross_attentions"] = dec.extras["cross_attentions"]
            attentions = enc.attentions + dec.attentions
        return EncoderOutput(y, hidden_states, pooled, extras, attentions)
