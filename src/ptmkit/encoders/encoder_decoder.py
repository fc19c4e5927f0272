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
  on each stack (``{encoder,decoder}.final_norm``); ``norm_type="rms"``: T5's RMS norm,
  ``x / sqrt(mean(x^2) + eps) * g`` (no mean subtraction, no bias; ``torch.nn.RMSNorm``).
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

With ``norm="pre"`` the last entry of each half's hidden states is the stack's output after the
final norm (the layer's raw output is not listed), as HF T5 reports them.

Attention is :func:`ptmkit.nn.attention.attend` (SDPA; with dropout on CPU, the product written
out around :mod:`ptmkit.nn.dropout`'s fast mask); padding masks go through
:func:`ptmkit.nn.masks.build_attention_mask`, which never leaves a query row with nothing to
attend to (no NaN from fully padded rows).

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
With the T5 options: ``{encoder,decoder}.relative_bias.bias.weight [buckets, h]`` instead of the
position tables, ``{encoder,decoder}.final_norm.weight``, ``....ffn.fc1_linear.weight`` (gated), and
no ``bias`` tensors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.errors import PtmError, suggest
from ptmkit.nn.attention import MultiHeadSelfAttention, attend
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.heads import PrunableHeads, check_heads, head_gates, keep_columns, keep_rows, merge_heads
from ptmkit.nn.masks import build_attention_mask
from ptmkit.nn.positions import RelativePositionBias
from ptmkit.registry import register

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
NORMS = ("post", "pre")
NORM_TYPES = ("layer", "rms")
POSITIONS = ("absolute", "relative")
INITS = ("normal", "t5")
POSITION_OFFSET = 2  # BART reads position t from row t + 2 of its position tables
KV = tuple[torch.Tensor, torch.Tensor]  # attention keys and values, each [B, h, t, d]


@dataclass(frozen=True)
class EncoderDecoderConfig:
    vocab_size: int = 50265
    hidden_size: int = 768  # d_model
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_heads: int = 12  # in every self- and cross-attention
    intermediate_size: int = 3072  # FFN inner size, encoder and decoder
    max_position: int = 1024  # positions per side (the tables have max_position + 2 rows)
    activation: str = "gelu"  # "gelu" (exact erf, BART) | "gelu_tanh" | "relu"
    dropout: float = 0.1  # embeddings and every residual branch
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0  # inside the FFN, after the activation
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02
    scale_embedding: bool = False  # token embeddings * sqrt(hidden_size)
    embedding_norm: bool = True  # LayerNorm after token + position embeddings (BART: layernorm_embedding)
    pad_token_id: int = 0
    # The decoder's first input.  BART starts with its end-of-sequence token; ptmkit's tokenizers
    # reserve [PAD] [UNK] [CLS] [SEP] [MASK] as ids 0-4, so 3 is [SEP] (objectives check it).
    decoder_start_token_id: int = 3
    # T5's switches (see the module docstring); the defaults are BART's
    norm: str = "post"  # "post" (BART) | "pre" (T5: LN before each sub-layer, final LN per stack)
    norm_type: str = "layer"  # "layer" (LayerNorm) | "rms" (T5's RMS norm, no bias)
    bias: bool = True  # biases in the attention and FFN projections
    positions: str = "absolute"  # "absolute" (learned tables) | "relative" (T5 buckets)
    relative_buckets: int = 32
    relative_max_distance: int = 128
    scale_attention: bool = True  # scores / sqrt(d); T5: false
    gated_ffn: bool = False  # T5 v1.1's gated FFN
    scale_decoder_output: bool = False  # decoder output * H^-1/2 before the tied projection (T5)
    init: str = "normal"  # "normal": N(0, init_std) (BART) | "t5": T5's fan-in scaled init
    # heads removed by prune_heads: {"encoder.i" | "decoder.j" | "cross.j": [original head index, ...]}
    pruned_heads: dict[str, tuple[int, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("dropout", "attention_dropout", "activation_dropout", "layer_norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in ("vocab_size", "hidden_size", "encoder_layers", "decoder_layers", "num_heads", "intermediate_size",
                     "max_position"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise PtmError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                f"pick a number of heads that divides the hidden size"
            )
        if self.activation not in ACTIVATIONS:
            hint = suggest(str(self.activation), ACTIVATIONS)
            raise PtmError(f"model.activation={self.activation!r} is not one of {ACTIVATIONS}{hint}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= float(getattr(self, name)) < 1.0:
                raise PtmError(f"model.{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name, allowed in (("norm", NORMS), ("norm_type", NORM_TYPES), ("positions", POSITIONS), ("init", INITS)):
            value = getattr(self, name)
            if value not in allowed:
                raise PtmError(f"model.{name}={value!r} is not one of {allowed}{suggest(str(value), allowed)}")
        for name in ("bias", "scale_attention", "gated_ffn", "scale_decoder_output"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("relative_buckets", "relative_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 4:
                raise PtmError(f"model.{name} must be an integer >= 4, got {value!r}")
        # the log-spaced buckets start after the exact offsets (buckets / 2 in the causal decoder)
        if self.positions == "relative" and self.relative_max_distance <= self.relative_buckets // 2:
            raise PtmError(
                f"model.relative_max_distance={self.relative_max_distance} must exceed the exact offsets "
                f"(relative_buckets / 2 = {self.relative_buckets // 2}); raise it"
            )
        if float(self.layer_norm_eps) <= 0 or float(self.init_std) <= 0:
            raise PtmError("model.layer_norm_eps and model.init_std must be positive")
        for name in ("pad_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise PtmError(f"model.{name}={value!r} is outside the vocabulary (size {self.vocab_size})")
        object.__setattr__(self, "pruned_heads", check_heads(self.pruned_heads, self.attention_key("model.pruned_heads"),
                                                             self.num_heads, "model.pruned_heads"))

    def attention_key(self, name: str):
        """A ``layers`` function for :func:`ptmkit.nn.heads.check_heads`: ``"encoder.i"`` (encoder
        self-attention; a bare ``i`` too, as HF's encoder–decoders number them),
        ``"decoder.j"`` (decoder self-attention) or ``"cross.j"`` (decoder ``j``'s cross-attention)."""
        sizes = {"encoder": self.encoder_layers, "decoder": self.decoder_layers, "cross": self.decoder_layers}

        def parse(key: Any) -> str:
            if isinstance(key, int) and not isinstance(key, bool):
                key = f"encoder.{key}"
            kind, _, index = str(key).partition(".")
            if kind in sizes and index.isdigit() and int(index) < sizes[kind]:
                return f"{kind}.{int(index)}"
            raise PtmError(
                f"{name} names {key!r}; attention layers are 'encoder.0' .. 'encoder.{self.encoder_layers - 1}', "
                f"'decoder.0' .. 'decoder.{self.decoder_layers - 1}' (self-attention) and 'cross.0' .. "
                f"'cross.{self.decoder_layers - 1}' (cross-attention)"
            )

        return parse

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_layers(self) -> int:
        return self.encoder_layers + self.decoder_layers


@dataclass
class DecoderCache:
    """Incremental decoding state.

    self_kv: per decoder layer, the self-attention keys and values ``[B, h, t, d]`` of the ``t``
    positions decoded so far; cross_kv: per layer, the cross-attention keys and values
    ``[B, h, S, d]`` of the encoder states (projected once); cross_mask: the source padding mask
    ``[B, 1, 1, S]`` (bool) or ``None``.
    """

    self_kv: list[KV | None]
    cross_kv: list[KV]
    cross_mask: torch.Tensor | None

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the next position's index)."""
        first = self.self_kv[0] if self.self_kv else None
        return 0 if first is None else int(first[0].shape[2])


def _merge(y: torch.Tensor) -> torch.Tensor:
    """``[B, h, T, d] -> [B, T, H]``."""
    B, h, T, d = y.shape
    return y.transpose(1, 2).reshape(B, T, h * d)


class DecoderSelfAttention(MultiHeadSelfAttention):
    """Causal self-attention (the parameters of :class:`MultiHeadSelfAttention`) with a step that
    extends cached keys and values, for incremental decoding."""

    def step(self, x: torch.Tensor, past: KV | None, position_bias: torch.Tensor | None = None,
             head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, KV]:
        """x ``[B, T, H]`` at positions ``t0 .. t0 + T - 1`` where ``t0`` = the cached length;
        past: keys/values ``[B, h, t0, d]`` or ``None``; position_bias: an additive float mask
        ``[1, h, T, t0 + T]`` (relative positions, causal pattern included) or ``None``.  Returns
        ``[B, T, H]`` and the keys/values ``[B, h, t0 + T, d]``; head_gate / probs as in
        :meth:`MultiHeadSelfAttention.forward`."""
        B, T, H = x.shape
        if self.pruned:
            position_bias, head_gate = self.head_slice(position_bias), self.gate(head_gate)
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        t0 = 0
        if past is not None:
            t0 = past[0].shape[2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        mask, is_causal = None, False
        if T > 1:
            if t0 == 0:
                is_causal = True
            else:  # query i (position t0 + i) sees keys j <= t0 + i
                mask = torch.ones(T, t0 + T, dtype=torch.bool, device=x.device).tril(t0)
        dropout = self.attention_dropout if self.training else 0.0
        if position_bias is not None:  # [1, h, T, t0 + T], already holding the causal pattern
            mask, is_causal = position_bias, False
        y = attend(q, k, v, mask, is_causal, dropout, self.scale, head_gate, probs)
        return self.out(_merge(y)), (k, v)


class CrossAttention(PrunableHeads, nn.Module):
    """Decoder queries attend to encoder states.  Parameters: ``q.{weight [H, H], bias [H]}``,
    ``kv.{weight [2H, H], bias [2H]}`` (key and value projections stacked, one matmul for both),
    ``out.{weight [H, H], bias [H]}``; pruned to ``h'`` heads: ``q [h' d, H]``, ``kv [2 h' d, H]``,
    ``out [H, h' d]``."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float = 0.0, bias: bool = True,
                 scale: float | None = None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.attention_dropout = attention_dropout
        self.scale = scale
        self.q = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.kv = nn.Linear(hidden_size, 2 * hidden_size, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)
        self._init_heads(num_heads)

    def _keep(self, local: list[int]) -> None:
        device = self.q.weight.device
        keep_rows(self.q, self.rows(local, 1, device))
        keep_rows(self.kv, self.rows(local, 2, device))
        keep_columns(self.out, self.rows(local, 1, device))

    def project_memory(self, memory: torch.Tensor) -> KV:
        """Encoder states ``[B, S, H]`` -> keys and values ``[B, h, S, d]`` each."""
        B, S, H = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return k, v

    def forward(self, y: torch.Tensor, kv: KV, mask: torch.Tensor | None, head_gate: torch.Tensor | None = None,
                probs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """y ``[B, T, H]``; kv from :meth:`project_memory`; mask ``[B, 1, 1, S]`` (bool, True = may
        attend) or ``None`` -> ``[B, T, H]``; head_gate ``[total_heads]`` / probs (receives
        ``[B, h, T, S]``) as in :meth:`MultiHeadSelfAttention.forward`."""
        B, T, _ = y.shape
        q = self.q(y).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0
        out = attend(q, kv[0], kv[1], mask, False, dropout, self.scale, self.gate(head_gate), probs)
        return self.out(_merge(out))


def _ffn(ffn: FeedForward, x: torch.Tensor, act_dropout: Dropout) -> torch.Tensor:
    """BART's FFN: ``fc2(dropout(act(fc1(x))))`` with the FFN's own parameters (T5 v1.1:
    ``fc2(dropout(act(fc1(x)) * fc1_linear(x)))``)."""
    return ffn.fc2(act_dropout(ffn.inner(x)))


def make_norm(cfg: EncoderDecoderConfig) -> nn.Module:
    """LayerNorm (BART) or RMS norm (T5: no mean subtraction, no bias) over ``H``."""
    if cfg.norm_type == "rms":
        return nn.RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)


def _attention_scale(cfg: EncoderDecoderConfig) -> float | None:
    return None if cfg.scale_attention else 1.0  # None: SDPA's default 1/sqrt(d)


class EncoderLayer(nn.Module):
    """Post-LN block: ``x = LN(x + drop(SelfAttn(x)))``; ``x = LN(x + drop(FFN(x)))``; ``[B, S, H]``
    (pre-LN with ``norm="pre"``: ``x = x + drop(SelfAttn(LN(x)))``, ``x = x + drop(FFN(LN(x)))``)."""

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.attn = MultiHeadSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, cfg.bias,
                                           _attention_scale(cfg))
        self.attn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation, cfg.bias, cfg.gated_ffn)
        self.ffn_norm = make_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.act_dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
                head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """head_gate ``[heads]`` / probs: see :meth:`MultiHeadSelfAttention.forward`."""
        if not self.pre:  # BART: the original expressions, unchanged
            x = self.attn_norm(x + self.dropout(self.attn(x, mask, is_causal, head_gate, probs)))
            return self.ffn_norm(x + self.dropout(_ffn(self.ffn, x, self.act_dropout)))
        x = x + self.dropout(self.attn(self.attn_norm(x), mask, is_causal, head_gate, probs))
        return x + self.dropout(_ffn(self.ffn, self.ffn_norm(x), self.act_dropout))


class DecoderLayer(nn.Module):
    """Post-LN (or pre-LN) block: causal self-attention, cross-attention over the encoder, FFN; ``[B, T, H]``."""

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        H = cfg.hidden_size
        self.pre = cfg.norm == "pre"
        scale = _attention_scale(cfg)
        self.self_attn = DecoderSelfAttention(H, cfg.num_heads, cfg.attention_dropout, cfg.bias, scale)
        self.self_attn_norm = make_norm(cfg)
        self.cross_attn = CrossAttention(H, cfg.num_heads, cfg.attention_dropout, cfg.bias, scale)
        self.cross_attn_norm = make_norm(cfg)
        self.ffn = FeedForward(H, cfg.intermediate_size, cfg.activation, cfg.bias, cfg.gated_ffn)
        self.ffn_norm = make_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.act_dropout = Dropout(cfg.activation_dropout)

    def forward(
        self,
        y: torch.Tensor,
        self_mask: torch.Tensor | None,
        is_causal: bool,
        memory_kv: KV,
        cross_mask: torch.Tensor | None,
        past: KV | None = None,
        use_cache: bool = False,
        self_gate: torch.Tensor | None = None,
        cross_gate: torch.Tensor | None = None,
        self_probs: list[torch.Tensor] | None = None,
        cross_probs: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, KV | None]:
        """y ``[B, T, H]``; self_mask / is_causal: the decoder's own attention pattern (ignored when
        caching without relative positions: positions are causal by construction; with them, the
        cached step's mask is the position bias ``[1, h, T, t0 + T]``); memory_kv: the encoder
        states' keys and values for this layer; cross_mask ``[B, 1, 1, S]`` or ``None``.  Returns
        ``[B, T, H]`` and, with ``use_cache``, this layer's self-attention keys/values so far.
        self_gate / cross_gate ``[heads]`` and self_probs / cross_probs (lists the probabilities are
        appended to): each attention's head gates and probabilities."""
        if not self.pre:  # BART: the original expressions, unchanged
            if use_cache:
                a, kv = self.self_attn.step(y, past, None, self_gate, self_probs)
            else:
                a, kv = self.self_attn(y, self_mask, is_causal, self_gate, self_probs), None
            y = self.self_attn_norm(y + self.dropout(a))
            y = self.cross_attn_norm(y + self.dropout(self.cross_attn(y, memory_kv, cross_mask, cross_gate, cross_probs)))
            return self.ffn_norm(y + self.dropout(_ffn(self.ffn, y, self.act_dropout))), kv
        h = self.self_attn_norm(y)
        if use_cache:
            a, kv = self.self_attn.step(h, past, self_mask, self_gate, self_probs)
        else:
            a, kv = self.self_attn(h, self_mask, is_causal, self_gate, self_probs), None
        y = y + self.dropout(a)
        y = y + self.dropout(self.cross_attn(self.cross_attn_norm(y), memory_kv, cross_mask, cross_gate, cross_probs))
        return y + self.dropout(_ffn(self.ffn, self.ffn_norm(y), self.act_dropout)), kv


class _Stack(nn.Module):
    """One half's position table (or relative position bias), embedding LayerNorm, layers and
    (pre-LN) final norm."""

    def __init__(self, cfg: EncoderDecoderConfig, layer: type, n: int, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        absolute = cfg.positions == "absolute"
        self.position_embeddings = nn.Embedding(cfg.max_position + POSITION_OFFSET, cfg.hidden_size) if absolute else None
        self.relative_bias = (None if absolute else
                              RelativePositionBias(cfg.num_heads, cfg.relative_buckets, cfg.relative_max_distance))
        self.embedding_norm = make_norm(cfg) if cfg.embedding_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(layer(cfg) for _ in range(n))
        self.final_norm = make_norm(cfg) if cfg.norm == "pre" else None

    def embed(self, tokens: torch.Tensor, start: int = 0, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[B, T, H]`` (already scaled) at positions ``start .. start + T - 1``,
        or at explicit ``position_ids [B, T]`` -> the first layer's input ``[B, T, H]``.  Without a
        position table (relative positions) the tokens enter as they are."""
        x = tokens
        if position_ids is not None:  # e.g. MASS: a span's tokens at their places in the sentence
            x = tokens + self.position_embeddings(position_ids + POSITION_OFFSET)
        elif self.position_embeddings is not None:
            T = tokens.shape[1]
            lo = start + POSITION_OFFSET
            x = tokens + self.position_embeddings.weight[lo : lo + T]  # [T, H] broadcast over the batch
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        return self.dropout(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The stack's output: pre-LN stacks end in a norm and dropout (T5), post-LN ones as they are."""
        return x if self.final_norm is None else self.dropout(self.final_norm(x))

    def position_mask(self, mask: torch.Tensor | None, is_causal: bool, q_len: int, k_len: int,
                      dtype: torch.dtype, q_start: int = 0) -> tuple[torch.Tensor | None, bool]:
        """Fold the relative position bias (computed once, shared by every layer) into the
        attention mask from :func:`build_attention_mask`: ``[B|1, h, T_q, T_k]`` float, with masked
        keys at the dtype minimum.  Without relative positions the mask is returned as is."""
        if self.relative_bias is None:
            return mask, is_causal
        device = self.relative_bias.bias.weight.device
        bias = self.relative_bias(q_len, k_len, self.bidirectional, device, q_start).to(dtype)  # [1, h, Tq, Tk]
        if is_causal:  # the fast path's implicit causal mask, made explicit
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(q_start)
        if mask is None:
            return bias, False
        if mask.dtype == torch.bool:
            return bias.masked_fill(~mask, torch.finfo(dtype).min), False
        return bias + mask, False


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
        return out.masked_fill_(out == -100, self.config.pad_token_id)

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
        hidden = [x] if output_hidden_states else None
        probs: list[torch.Tensor] | None = [] if output_attentions else None
        for i, layer in enumerate(self.encoder.layers):
            x = layer(x, mask, is_causal, None if gates is None else gates[i], probs)
            if hidden is not None:
                hidden.append(x)
        x = self.encoder.finish(x)
        if hidden is not None and self.encoder.final_norm is not None:
            hidden[-1] = x  # pre-LN: the stack's normalised output stands for its last layer
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
        attention it changes nothing at the real positions, so training passes none).  With
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
        hidden = [y] if output_hidden_states else None
        self_probs: list[torch.Tensor] | None = [] if output_attentions else None
        cross_probs: list[torch.Tensor] | None = [] if output_attentions else None
        new_kv: list[KV | None] = []
        for i, layer in enumerate(self.decoder.layers):
            past = cache.self_kv[i] if cache is not None else None
            y, kv = layer(y, self_mask, is_causal, cross_kv[i], cross_mask, past, cache is not None,
                          None if self_gates is None else self_gates[i], None if cross_gates is None else cross_gates[i],
                          self_probs, cross_probs)
            new_kv.append(kv)
            if hidden is not None:
                hidden.append(y)
        y = self.decoder.finish(y)
        if hidden is not None and self.decoder.final_norm is not None:
            hidden[-1] = y
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
            # right padding + causal attention: the real positions never see the padded ones
            decoder_attention_mask = None
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
