"""``TransformerConfig``: the size and wiring of a Transformer backbone.

One config describes both families:

* BERT (Devlin et al. 2019): ``norm="post"``, ``activation="gelu"`` (exact erf), ``layer_norm_eps=1e-12``,
  ``embedding_norm=True``, ``type_vocab_size=2``, ``pooler=True``, ``causal=False``.
* GPT-2 (Radford et al. 2019): ``norm="pre"`` with a final LayerNorm, ``activation="gelu_tanh"``,
  ``layer_norm_eps=1e-5``, ``type_vocab_size=0``, ``causal=True``, ``scaled_residual_init=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmkit.errors import PtmError, suggest

NORMS = ("post", "pre")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2  # 0 = no segment embeddings
    norm: str = "post"  # "post" (BERT) | "pre" (GPT-2, adds final_norm)
    activation: str = "gelu"  # "gelu" (exact erf) | "gelu_tanh" | "relu"
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    attention_dropout: float = 0.1
    causal: bool = False
    embedding_norm: bool = True  # BERT: LayerNorm after the embedding sum
    pooler: bool = True  # BERT: pooled = tanh(W h_[CLS] + b)
    init_std: float = 0.02
    scaled_residual_init: bool = False  # GPT-2: residual projections ~ N(0, init_std / sqrt(2 L))
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        # YAML 1.1 reads "1e-12" as a string; accept any float spelling.
        for name in ("layer_norm_eps", "dropout", "attention_dropout", "init_std"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise PtmError(f"model.type_vocab_size must be an integer >= 0, got {self.type_vocab_size!r}")
        if self.hidden_size % self.num_heads:
            raise PtmError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                f"pick a number of heads that divides the hidden size"
            )
        if self.norm not in NORMS:
            raise PtmError(f"model.norm={self.norm!r} is not one of {NORMS}{suggest(str(self.norm), NORMS)}")
        if self.activation not in ACTIVATIONS:
            raise PtmError(
                f"model.activation={self.activation!r} is not one of {ACTIVATIONS}{suggest(str(self.activation), ACTIVATIONS)}"
            )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise PtmError(f"model.{name} must be in [0, 1), got {value!r}")
        if float(self.layer_norm_eps) <= 0 or float(self.init_std) <= 0:
            raise PtmError("model.layer_norm_eps and model.init_std must be positive")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise PtmError(f"model.pad_token_id={self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads
