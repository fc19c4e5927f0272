"""The configuration of the encoder–decoder (:class:`EncoderDecoderConfig`: BART's and T5's settings,
checked when built); the model is :mod:`ptmkit.encoders.encoder_decoder`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ptmkit.errors import PtmError, suggest
from ptmkit.nn.heads import check_heads

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
                f"'decoder.0' .. 'decoder.{self.decoder_layers - 1}' and 'cross.0' .. "
                f"'cross.{self.decoder_layers - 1}' (cross-attention)"
            )

        return parse

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_layers(self) -> int:
        return self.encoder_layers + self.decoder_layers
