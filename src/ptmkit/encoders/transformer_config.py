"""The configuration of the Transformer encoder (:class:`TransformerConfig`: BERT's, GPT-2's, ALBERT's
and T5-style settings, checked when built); the model is :mod:`ptmkit.encoders.transformer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ptmkit.errors import PtmError, suggest
from ptmkit.nn.heads import check_heads, layer_number
from ptmkit.nn.norms import NORM_TYPES

NORMS = ("post", "pre")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
POSITIONS = ("absolute", "relative", "rope", "alibi", "none")
SHARING = ("none", "all", "attention", "ffn")
FFNS = ("plain", "swiglu")


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2  # 0 = no segment embeddings
    norm: str = "post"  # where the norms sit: "post" (BERT) | "pre" (GPT-2, adds final_norm)
    activation: str = "gelu"  # "gelu" (exact erf) | "gelu_tanh" | "relu"
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    attention_dropout: float = 0.1
    embedding_norm: bool = True  # BERT: LayerNorm after the embedding sum
    pooler: bool = True  # BERT: pooled = tanh(W h_[CLS] + b)
    init_std: float = 0.02
    scaled_residual_init: bool = False  # GPT-2: residual projections ~ N(0, init_std / sqrt(2 L))
    pad_token_id: int = 0
    # "absolute" (learned) | "relative" (T5 buckets) | "rope" (rotary) | "alibi" (linear biases) | "none"
    positions: str = "absolute"
    relative_buckets: int = 32
    relative_max_distance: int = 128
    embedding_size: int | None = None  # E; None = hidden_size (ALBERT: 128, then a projection E -> H)
    sharing: str = "none"  # cross-layer parameter sharing (ALBERT): none | all | attention | ffn
    # LayerDrop (Fan et al. 2020): in training each layer is skipped with this probability (0 = off)
    layerdrop: float = 0.0
    # heads removed by prune_heads, {layer: [original head index, ...]}; the weights are that much smaller
    pruned_heads: dict[int, tuple[int, ...]] = field(default_factory=dict, hash=False)
    rope_theta: float = 10000.0  # RoPE's base: pair p of a head turns by position * theta^(-2p/d)
    ffn: str = "plain"  # "plain": fc2(act(fc1 x)) | "swiglu": fc2(silu(fc1 x) * fc1_linear x) (LLaMA)
    norm_type: str = "layernorm"  # "layernorm" | "rmsnorm" (Zhang & Sennrich 2019; LLaMA)
    bias: bool = True  # biases in the attention and FFN projections and the norms (LLaMA: none)
    num_kv_heads: int | None = None  # grouped-query attention's key/value heads; None = num_heads

    def __post_init__(self) -> None:
        if self.sharing is None:  # `model.sharing=none` on the command line reads as null
            object.__setattr__(self, "sharing", "none")
        # YAML 1.1 reads "1e-12" as a string; accept any float spelling.
        for name in ("layer_norm_eps", "dropout", "attention_dropout", "init_std", "layerdrop", "rope_theta"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position",
                     "relative_buckets", "relative_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        if self.embedding_size is not None and (not isinstance(self.embedding_size, int) or self.embedding_size <= 0):
            raise PtmError(f"model.embedding_size must be a positive integer or null, got {self.embedding_size!r}")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise PtmError(f"model.type_vocab_size must be an integer >= 0, got {self.type_vocab_size!r}")
        if self.hidden_size % self.num_heads:
            raise PtmError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                f"pick a number of heads that divides the hidden size"
            )
        for name, allowed in (("norm", NORMS), ("activation", ACTIVATIONS), ("positions", POSITIONS), ("sharing", SHARING),
                              ("ffn", FFNS), ("norm_type", NORM_TYPES)):
            value = getattr(self, name)
            if value not in allowed:
                raise PtmError(f"model.{name}={value!r} is not one of {allowed}{suggest(str(value), allowed)}")
        self._check_modern_options()
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise PtmError(f"model.{name} must be in [0, 1), got {value!r}")
        if isinstance(self.layerdrop, bool) or not 0.0 <= float(self.layerdrop) <= 1.0:
            raise PtmError(f"model.layerdrop is the probability of skipping a layer in training, in [0, 1] (0 = off), "
                           f"got {self.layerdrop!r}")
        if float(self.layer_norm_eps) <= 0 or float(self.init_std) <= 0:
            raise PtmError("model.layer_norm_eps and model.init_std must be positive")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise PtmError(f"model.pad_token_id={self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        pruned = check_heads(self.pruned_heads, layer_number(self.num_layers, "model.pruned_heads"), self.num_heads,
                             "model.pruned_heads")
        object.__setattr__(self, "pruned_heads", pruned)  # JSON's string keys back to layer numbers
        if pruned and self.shares_attention:
            if len(pruned) != self.num_layers or len(set(pruned.values())) != 1:
                raise PtmError(
                    f"model.pruned_heads={dict(pruned)} prunes layers differently, but with model.sharing="
                    f"{self.sharing!r} every layer uses one attention module: prune the same heads in all "
                    f"{self.num_layers} layers"
                )

    def _check_modern_options(self) -> None:
        """``bias``, ``num_kv_heads`` and ``rope_theta`` (the options of LLaMA-style models)."""
        if not isinstance(self.bias, bool):
            raise PtmError(f"model.bias must be true or false, got {self.bias!r}")
        kv = self.num_kv_heads
        if kv is not None and (not isinstance(kv, int) or isinstance(kv, bool) or kv <= 0 or self.num_heads % kv):
            raise PtmError(f"model.num_kv_heads must be a positive integer dividing model.num_heads={self.num_heads} "
                           f"(or null: as many as num_heads), got {kv!r}")
        if kv is not None and kv != self.num_heads and self.pruned_heads:
            raise PtmError(f"model.pruned_heads cannot be set with grouped-query attention (model.num_kv_heads={kv} "
                           f"< num_heads={self.num_heads})")
        if isinstance(self.rope_theta, bool) or not float(self.rope_theta) > 0:
            raise PtmError(f"model.rope_theta must be a positive number, got {self.rope_theta!r}")
        if self.positions == "rope" and self.head_dim % 2:
            raise PtmError(f"model.positions='rope' rotates pairs of dimensions: the head size hidden_size / "
                           f"num_heads = {self.head_dim} must be even")

    def llama_options(self) -> list[str]:
        """The options of LLaMA-style models this config sets, as ``key=value`` (none: empty): what
        the BERT and GPT-2 families' HF formats cannot express."""
        defaults = {"ffn": "plain", "norm_type": "layernorm", "bias": True}
        out = [f"{k}={getattr(self, k)!r}" for k, v in defaults.items() if getattr(self, k) != v]
        if self.kv_heads != self.num_heads:
            out.append(f"num_kv_heads={self.num_kv_heads}")
        return out

    @property
    def kv_heads(self) -> int:
        """The key/value heads of grouped-query attention (Ainslie et al. 2023); ``num_heads`` without it."""
        return self.num_kv_heads or self.num_heads

    @property
    def shares_attention(self) -> bool:
        """All layers use one attention module (ALBERT's ``sharing: all | attention``)."""
        return self.sharing in ("all", "attention") and self.num_layers > 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def embedding_dim(self) -> int:
        """E: the width of the embedding tables (= ``hidden_size`` unless factorized)."""
        return self.embedding_size or self.hidden_size
