"""LLaMA <-> HF transformers (``LlamaModel``, ``LlamaForCausalLM``).

The key map (ptmkit name on the left, HF on the right, ``l`` = ``model.layers.{i}``)::

    backbone.embeddings.word_embeddings             model.embed_tokens   (= lm_head, tied)
    backbone.layers.{i}.attn_norm                   l.input_layernorm
    backbone.layers.{i}.attn.qkv   [(h + 2g) d, H]  l.self_attn.q_proj [h d, H], k_proj [g d, H], v_proj [g d, H]
    backbone.layers.{i}.attn.out                    l.self_attn.o_proj
    backbone.layers.{i}.ffn_norm                    l.post_attention_layernorm
    backbone.layers.{i}.ffn.fc1                     l.mlp.gate_proj
    backbone.layers.{i}.ffn.fc1_linear              l.mlp.up_proj
    backbone.layers.{i}.ffn.fc2                     l.mlp.down_proj
    backbone.final_norm                             model.norm

``h`` query heads, ``g`` key/value heads (grouped-query attention), head size ``d``.  Both sides
are ``nn.Linear`` (``[out, in]``) without biases, and both rotate the two halves of each head
(HF's ``rotate_half``), so q, k and v are stacked into ptmkit's fused ``qkv`` as they are.

A LLaMA-style ptmkit model: ``norm=pre``, ``norm_type=rmsnorm``, ``ffn=swiglu``, ``positions=rope``
(``rope_theta``), ``bias=false``, ``embedding_norm=false``, ``type_vocab_size=0``, trained with the
``clm`` objective; ``num_kv_heads`` is HF's ``num_key_value_heads`` and ``layer_norm_eps`` its
``rms_norm_eps``.  LLaMA has no hidden dropout (``model.dropout`` is not exported).

The LM head: the ``clm`` objective predicts through the word embeddings, so only tied checkpoints
(``tie_word_embeddings=true``, or an ``lm_head`` equal to ``embed_tokens``) import; an untied
``lm_head`` is refused, and exports are tied.  Rotary scaling (``rope_scaling`` /
``rope_parameters`` of a type other than ``default``: linear, dynamic, yarn, llama3, ...) is
refused, as are biases (``attention_bias``, ``mlp_bias``), another ``head_dim`` and an activation
other than SiLU.

Tokenizer: ptmkit's :class:`ptmkit.tokenization.Tokenizer` reserves [PAD] [UNK] [CLS] [SEP] [MASK].
LLaMA's own tokenizers (LLaMA 1 and 2: SentencePiece BPE with ``<s>``, ``</s>``, ``<unk>``, often
only as ``tokenizer.model``; LLaMA 3: a byte-level BPE with ``<|begin_of_text|>`` ...) hold none of
them, so such a directory is refused with that reason; a LLaMA-architecture model with a ptmkit
tokenizer (an export of ours) round-trips.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ptmkit.config import to_dict
from ptmkit.encoders.transformer import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.interop.hf_common import (
    HFFamily,
    assemble,
    check_pad,
    hf,
    load_hf_weights,
    load_tokenizer,
    read_hf,
    write_hf_dir,
)
from ptmkit.objectives.clm import CLMConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

# ptmkit's key -> HF's, per layer (``qkv`` is split separately)
_LAYER = (
    ("attn.out", "self_attn.o_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn.fc1", "mlp.gate_proj"),
    ("ffn.fc1_linear", "mlp.up_proj"),
    ("ffn.fc2", "mlp.down_proj"),
)


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = True) -> list[str]:
    """What keeps a model from being a LLaMA (empty when it is one), each naming the setting."""
    if not isinstance(model_cfg, TransformerConfig):
        return [f"its encoder is not a Transformer ({type(model_cfg).__name__})"]
    c = model_cfg
    out = []
    if c.positions != "rope":
        out.append(f"positions={c.positions!r} (LLaMA has rotary positions: model.positions=rope)")
    if c.norm != "pre":
        out.append(f"norm={c.norm!r} (LLaMA is pre-norm)")
    if c.norm_type != "rmsnorm":
        out.append(f"norm_type={c.norm_type!r} (LLaMA uses RMSNorm)")
    if c.ffn != "swiglu":
        out.append(f"ffn={c.ffn!r} (LLaMA's feed-forward is SwiGLU)")
    if c.bias:
        out.append("bias=true (LLaMA has no biases)")
    if c.type_vocab_size > 0:
        out.append(f"type_vocab_size={c.type_vocab_size} (LLaMA has no segment embeddings)")
    if c.embedding_norm:
        out.append("embedding_norm=true (LLaMA has no norm after the embeddings)")
    if c.embedding_size is not None:
        out.append(f"embedding_size={c.embedding_size} (LLaMA has no factorized embeddings)")
    if c.sharing != "none":
        out.append(f"sharing={c.sharing!r} (LLaMA shares no layers)")
    if not causal:
        out.append("its objective reads in both directions (LLaMA attends to the left only)")
    return out


def _rope(hf_cfg: Any) -> tuple[float, dict[str, Any] | None]:
    """``(rope_theta, scaling)`` of an HF config: ``rope_parameters`` (transformers 5) or
    ``rope_theta`` + ``rope_scaling`` (earlier); ``scaling`` is ``None`` for plain rotary positions."""
    params = dict(getattr(hf_cfg, "rope_parameters", None) or {})
    theta = params.pop("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0))
    scaling = getattr(hf_cfg, "rope_scaling", None)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        scaling = params
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return float(theta), scaling


def to_hf_config(model_cfg: TransformerConfig, eos_token_id: int | None = None, causal: bool = True) -> Any:
    """``TransformerConfig`` -> ``transformers.LlamaConfig``; :class:`PtmError` if LLaMA cannot express it."""
    found = problems(model_cfg, causal)
    if found:
        raise PtmError("this model cannot be exported as LLaMA: " + "; ".join(found))
    if model_cfg.dropout > 0:
        log.warning("LLaMA has no hidden dropout; model.dropout=%s is not exported (outputs are unchanged)",
                    model_cfg.dropout)
    return hf("LlamaConfig")(
        vocab_size=model_cfg.vocab_size,
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        num_key_value_heads=model_cfg.kv_heads,
        head_dim=model_cfg.head_dim,
        hidden_act="silu",
        max_position_embeddings=model_cfg.max_position,
        initializer_range=model_cfg.init_std,
        rms_norm_eps=model_cfg.layer_norm_eps,
        rope_theta=float(model_cfg.rope_theta),
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=model_cfg.attention_dropout,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=model_cfg.pad_token_id,
        tie_word_embeddings=True,
    )


def from_hf_config(hf_cfg: Any, pad_token_id: int = 0) -> TransformerConfig:
    """``transformers.LlamaConfig`` -> ``TransformerConfig``; :class:`PtmError` naming what ptmkit lacks."""
    if getattr(hf_cfg, "model_type", "llama") != "llama":
        raise PtmError(f"expected a LLaMA checkpoint (model_type 'llama'), got model_type {hf_cfg.model_type!r}")
    theta, scaling = _rope(hf_cfg)
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        raise PtmError(f"rope_scaling of type {kind!r} is not supported: ptmkit's rotary positions are unscaled "
                       f"(rope_type 'default' only)")
    if getattr(hf_cfg, "hidden_act", "silu") != "silu":
        raise PtmError(f"hidden_act={hf_cfg.hidden_act!r} is not supported: ptmkit's SwiGLU gates with SiLU")
    for name in ("attention_bias", "mlp_bias"):
        if getattr(hf_cfg, name, False):
            raise PtmError(f"{name}=true is not supported: ptmkit's LLaMA layers have no biases")
    heads = hf_cfg.num_attention_heads
    head_dim = getattr(hf_cfg, "head_dim", None)
    if head_dim is not None and head_dim * heads != hf_cfg.hidden_size:
        raise PtmError(f"head_dim={head_dim} is not supported: ptmkit's heads are hidden_size / num_attention_heads "
                       f"= {hf_cfg.hidden_size / heads:g} wide")
    kv = getattr(hf_cfg, "num_key_value_heads", None) or heads
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.hidden_size,
        num_layers=hf_cfg.num_hidden_layers,
        num_heads=heads,
        num_kv_heads=None if kv == heads else int(kv),
        intermediate_size=hf_cfg.intermediate_size,
        max_position=hf_cfg.max_position_embeddings,
        type_vocab_size=0,
        norm="pre",
        norm_type="rmsnorm",
        ffn="swiglu",
        positions="rope",
        rope_theta=theta,
        bias=False,
        layer_norm_eps=float(hf_cfg.rms_norm_eps),
        dropout=0.0,
        attention_dropout=float(getattr(hf_cfg, "attention_dropout", 0.0) or 0.0),
        embedding_norm=False,
        pooler=False,
        init_std=float(hf_cfg.initializer_range),
        pad_token_id=int(pad_token_id),
    )


# -- key map -------------------------------------------------------------------------------------
def _split_sizes(cfg: TransformerConfig) -> list[int]:
    d = cfg.head_dim
    return [cfg.num_heads * d, cfg.kv_heads * d, cfg.kv_heads * d]


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict (``backbone.*``) -> ``LlamaForCausalLM`` keys (the tied ``lm_head`` left out)."""
    def take(key: str) -> torch.Tensor:
        return state[key].detach().contiguous().clone()

    out = {"model.embed_tokens.weight": take("backbone.embeddings.word_embeddings.weight"),
           "model.norm.weight": take("backbone.final_norm.weight")}
    for i in range(cfg.num_layers):
        ours, theirs = f"backbone.layers.{i}", f"model.layers.{i}"
        q, k, v = state[f"{ours}.attn.qkv.weight"].detach().split(_split_sizes(cfg))
        for name, t in zip("qkv", (q, k, v)):
            out[f"{theirs}.self_attn.{name}_proj.weight"] = t.contiguous().clone()
        for a, b in _LAYER:
            out[f"{theirs}.{b}.weight"] = take(f"{ours}.{a}.weight")
    return out


def state_dict_from_hf(hf_state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF LLaMA state dict (``model.*`` keys) -> PretrainModel keys (``backbone.*``)."""
    def take(key: str) -> torch.Tensor:
        if key not in hf_state:
            raise PtmError(f"the LLaMA checkpoint lacks {key}")
        return hf_state[key].detach().float().contiguous().clone()

    out = {"backbone.embeddings.word_embeddings.weight": take("model.embed_tokens.weight"),
           "backbone.final_norm.weight": take("model.norm.weight")}
    for i in range(cfg.num_layers):
        ours, theirs = f"backbone.layers.{i}", f"model.layers.{i}"
        out[f"{ours}.attn.qkv.weight"] = torch.cat([take(f"{theirs}.self_attn.{n}_proj.weight") for n in "qkv"])
        for a, b in _LAYER:
            out[f"{ours}.{a}.weight"] = take(f"{theirs}.{b}.weight")
    return out


def _with_model_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``LlamaModel`` keys have no ``model.`` prefix; add it so one key map serves both classes."""
    return {(k if k.startswith(("model.", "lm_head.")) else f"model.{k}"): v for k, v in state.items()}


# -- export --------------------------------------------------------------------------------------
def _eos(tokenizer: Any) -> int | None:
    if tokenizer is None:
        return None
    eos = getattr(tokenizer, "eos_id", None)
    return int(eos if eos is not None else tokenizer.sep_id)


def build_hf_llama(pretrained: Any) -> Any:
    """A ``LlamaForCausalLM`` (eval mode) holding ``pretrained``'s backbone; the LM head is tied."""
    cfg = pretrained.backbone.config
    hf_cfg = to_hf_config(cfg, eos_token_id=_eos(pretrained.tokenizer), causal=pretrained.causal)
    if cfg.pooler:
        log.warning("LLaMA has no pooler; the model's pooler is not exported")
    objective_params = list(pretrained.objective.state_dict()) if pretrained.objective is not None else []
    if objective_params:
        raise PtmError(f"the objective has its own parameters ({', '.join(objective_params[:3])}); LLaMA's only head "
                       f"is the tied LM head, so only clm-trained models export as LLaMA")
    model = hf("LlamaForCausalLM")(hf_cfg)
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    result = model.load_state_dict(state_dict_to_hf(state, cfg), strict=False)
    if set(result.missing_keys) - {"lm_head.weight"} or result.unexpected_keys:
        raise PtmError(f"cannot export as LLaMA: unmatched keys {result.missing_keys[:3]} {result.unexpected_keys[:3]}")
    model.tie_weights()
    return model.eval()


def export_llama(pretrained: Any, out_dir: str | Path) -> Path:
    """Write ``pretrained`` as an HF ``LlamaForCausalLM`` directory (``LlamaModel`` loads it too),
    with the tokenizer files."""
    return write_hf_dir(build_hf_llama(pretrained), pretrained, out_dir)


# -- import --------------------------------------------------------------------------------------
def llama_tokenizer(hf_dir: Path) -> Any:
    """ptmkit's ``Tokenizer`` of an HF LLaMA directory; :class:`PtmError` saying why LLaMA's own
    tokenizers cannot be one; ``None`` (logged) when the directory has no tokenizer files."""
    if not (hf_dir / "tokenizer.json").is_file() and (hf_dir / "tokenizer.model").is_file():
        raise PtmError(f"{hf_dir} has a SentencePiece tokenizer.model, which ptmkit cannot read; its Tokenizer "
                       f"needs a tokenizer.json with [PAD] [UNK] [CLS] [SEP] [MASK] (see docs/models.md)")
    try:
        return load_tokenizer(hf_dir)
    except PtmError as exc:
        if "special tokens" not in str(exc):
            raise
        raise PtmError(f"the tokenizer in {hf_dir} lacks [PAD] [UNK] [CLS] [SEP] [MASK]: LLaMA's own tokenizers "
                       f"(<s> </s> <unk>) cannot be ptmkit Tokenizers (see docs/models.md)") from None


def import_llama(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF LLaMA directory or model -> ``(TransformerConfig, PretrainModel state dict, tokenizer)``.

    The state dict holds ``backbone.*`` only: the causal LM head is the tied word embeddings.  An
    untied ``lm_head`` raises :class:`PtmError`; a ``LlamaModel`` (no head) imports its encoder.
    """
    model_cls = hf("LlamaForCausalLM")
    if isinstance(hf_dir_or_model, (str, Path)):
        hf_dir = Path(hf_dir_or_model)
        if tokenizer is None and (hf_dir / "config.json").is_file():
            tokenizer = llama_tokenizer(hf_dir)
        hf_model, present = load_hf_weights(model_cls, hf_dir)
    else:
        hf_model, present, tokenizer, _ = read_hf(model_cls, hf_dir_or_model, tokenizer)
    hf_cfg = hf_model.config
    hf_state = _with_model_prefix(present)
    pad = hf_cfg.pad_token_id
    if pad is None or not 0 <= pad < hf_cfg.vocab_size:
        pad = tokenizer.pad_id if tokenizer is not None else 0  # LLaMA often has no padding token
    check_pad(int(pad), tokenizer)
    cfg = from_hf_config(hf_cfg, pad)
    head = hf_state.get("lm_head.weight")
    if head is not None and not torch.equal(head, hf_state["model.embed_tokens.weight"]):
        raise PtmError("the checkpoint's lm_head is not tied to embed_tokens (tie_word_embeddings=false); ptmkit's clm "
                       "objective predicts through the word embeddings, so untied LLaMA models are not imported")
    if head is None and not getattr(hf_cfg, "tie_word_embeddings", False):
        log.warning("the checkpoint has no lm_head (a LlamaModel); the imported clm head is the tied word embeddings")
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def objective_section() -> dict[str, Any]:
    return {"name": "clm", **to_dict(CLMConfig())}


def load_hf_llama(hf_dir: str | Path) -> Any:
    """Import an HF LLaMA directory as a ready ``Pretrained`` (backbone + clm objective, eval mode)."""
    cfg, state, tokenizer = import_llama(hf_dir)
    return assemble(cfg, objective_section(), state, tokenizer, source=str(hf_dir))


@register("hf_family", "llama")
class LlamaFamily(HFFamily):
    """Pre-norm RMSNorm / SwiGLU / rotary causal Transformers with a tied LM head <-> ``LlamaForCausalLM``."""

    formats = ("llama",)
    model_types = ("llama",)

    def format_for(self, pretrained: Any) -> str | None:
        if problems(pretrained.backbone.config, pretrained.causal):
            return None
        return None if pretrained.objective is not None and list(pretrained.objective.state_dict()) else "llama"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return export_llama(pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_llama(hf_dir)
