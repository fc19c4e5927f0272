"""BART <-> HF transformers (``BartForConditionalGeneration``; ``BartModel`` directories import too).

The key map (ptmkit name on the left, HF on the right; ``E`` = ``model.encoder.layers.{i}``,
``D`` = ``model.decoder.layers.{j}``)::

    backbone.word_embeddings                    model.shared (= encoder/decoder embed_tokens = lm_head, tied)
    backbone.final_logits_bias [V]              final_logits_bias [1, V]
    backbone.encoder.position_embeddings        model.encoder.embed_positions   [P + 2, H], same offset 2
    backbone.encoder.embedding_norm             model.encoder.layernorm_embedding
    backbone.encoder.layers.{i}.attn.qkv [3H,H] E.self_attn.{q,k,v}_proj (3 x [H, H], stacked)
    backbone.encoder.layers.{i}.attn.out        E.self_attn.out_proj
    backbone.encoder.layers.{i}.attn_norm       E.self_attn_layer_norm
    backbone.encoder.layers.{i}.ffn.fc1 / fc2   E.fc1 / E.fc2
    backbone.encoder.layers.{i}.ffn_norm        E.final_layer_norm
    backbone.decoder.position_embeddings        model.decoder.embed_positions
    backbone.decoder.embedding_norm             model.decoder.layernorm_embedding
    backbone.decoder.layers.{j}.self_attn.qkv   D.self_attn.{q,k,v}_proj (stacked)
    backbone.decoder.layers.{j}.self_attn.out   D.self_attn.out_proj
    backbone.decoder.layers.{j}.self_attn_norm  D.self_attn_layer_norm
    backbone.decoder.layers.{j}.cross_attn.q    D.encoder_attn.q_proj
    backbone.decoder.layers.{j}.cross_attn.kv   D.encoder_attn.{k,v}_proj (2 x [H, H], stacked)
    backbone.decoder.layers.{j}.cross_attn.out  D.encoder_attn.out_proj
    backbone.decoder.layers.{j}.cross_attn_norm D.encoder_attn_layer_norm
    backbone.decoder.layers.{j}.ffn.fc1 / fc2   D.fc1 / D.fc2
    backbone.decoder.layers.{j}.ffn_norm        D.final_layer_norm

HF BART is post-LN with LayerNorm eps 1e-5 everywhere, a LayerNorm after each half's embedding
sum, one head count and FFN size per half, and an LM head tied to the shared embeddings; the
``bart`` objective has no parameters of its own.  ptmkit's tokenizers have no ``<s>``/``</s>``:
an exported model's ``bos``/``eos`` are the tokenizer's ``[CLS]``/``[SEP]``, its
``decoder_start_token_id`` the model's (``[SEP]`` in the presets, as BART starts from ``</s>``),
and it forces neither a first nor a last token, so HF's greedy ``generate`` equals
:func:`ptmkit.objectives.bart.greedy_decode`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ptmkit.config import to_dict
from ptmkit.encoders.encoder_decoder import EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.interop.hf_common import (
    ACT_TO_HF,
    HFFamily,
    activation_from_hf,
    assemble,
    check_pad,
    check_tied,
    hf,
    quiet_transformers,
    read_hf,
    write_hf_dir,
)
from ptmkit.objectives.bart import DenoisingConfig
from ptmkit.registry import register

_WB = ("weight", "bias")  # the two tensors of a Linear or LayerNorm
HF_LAYER_NORM_EPS = 1e-5  # HF BART's nn.LayerNorm default, not configurable
# Settings older BART configs carry (fairseq variants such as mBART) with the value plain BART has.
_PLAIN_BART = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": True,
    "static_position_embeddings": False,
    "add_bias_logits": False,
}


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any) -> list[str]:
    """What keeps a model from being a BART (empty when it is one)."""
    if not isinstance(model_cfg, EncoderDecoderConfig):
        return [f"its encoder is not an encoder-decoder ({type(model_cfg).__name__})"]
    out = []
    if not model_cfg.embedding_norm:
        out.append("embedding_norm=false (BART always normalises the embedding sum: layernorm_embedding)")
    if model_cfg.layer_norm_eps != HF_LAYER_NORM_EPS:
        out.append(f"layer_norm_eps={model_cfg.layer_norm_eps} (HF BART's LayerNorms use 1e-5)")
    # the encoder-decoder's switches for other models (T5) at their BART values
    plain = {"norm": "post", "norm_type": "layer", "bias": True, "positions": "absolute", "scale_attention": True,
             "gated_ffn": False, "scale_decoder_output": False}
    out += [f"{k}={getattr(model_cfg, k)!r} (BART has {k}={v!r})" for k, v in plain.items() if getattr(model_cfg, k) != v]
    return out


def to_hf_config(model_cfg: EncoderDecoderConfig, tokenizer: Any = None) -> Any:
    """``EncoderDecoderConfig`` -> ``transformers.BartConfig``; :class:`PtmError` if BART cannot express it."""
    BartConfig = hf("BartConfig")

    found = problems(model_cfg)
    if found:
        raise PtmError("this model cannot be exported as BART: " + "; ".join(found))
    bos = int(tokenizer.cls_id) if tokenizer is not None else None
    eos = int(tokenizer.sep_id) if tokenizer is not None else model_cfg.decoder_start_token_id
    return BartConfig(
        vocab_size=model_cfg.vocab_size,
        max_position_embeddings=model_cfg.max_position,
        d_model=model_cfg.hidden_size,
        encoder_layers=model_cfg.encoder_layers,
        decoder_layers=model_cfg.decoder_layers,
        encoder_attention_heads=model_cfg.num_heads,
        decoder_attention_heads=model_cfg.num_heads,
        encoder_ffn_dim=model_cfg.intermediate_size,
        decoder_ffn_dim=model_cfg.intermediate_size,
        activation_function=ACT_TO_HF[model_cfg.activation],
        dropout=model_cfg.dropout,
        attention_dropout=model_cfg.attention_dropout,
        activation_dropout=model_cfg.activation_dropout,
        init_std=model_cfg.init_std,
        scale_embedding=model_cfg.scale_embedding,
        pad_token_id=model_cfg.pad_token_id,
        bos_token_id=bos,
        eos_token_id=eos,
        decoder_start_token_id=model_cfg.decoder_start_token_id,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        tie_word_embeddings=True,
    )


def from_hf_config(hf_cfg: Any) -> EncoderDecoderConfig:
    """``transformers.BartConfig`` -> ``EncoderDecoderConfig``; :class:`PtmError` naming the setting
    for anything ptmkit's encoder-decoder does not implement."""
    if getattr(hf_cfg, "model_type", "bart") != "bart":
        raise PtmError(f"expected a BART checkpoint (model_type 'bart'), got model_type {hf_cfg.model_type!r}")
    if hf_cfg.encoder_attention_heads != hf_cfg.decoder_attention_heads:
        raise PtmError(
            f"encoder_attention_heads={hf_cfg.encoder_attention_heads} differs from decoder_attention_heads="
            f"{hf_cfg.decoder_attention_heads}; ptmkit's encoder-decoder uses one head count (model.num_heads)"
        )
    if hf_cfg.encoder_ffn_dim != hf_cfg.decoder_ffn_dim:
        raise PtmError(
            f"encoder_ffn_dim={hf_cfg.encoder_ffn_dim} differs from decoder_ffn_dim={hf_cfg.decoder_ffn_dim}; "
            f"ptmkit's encoder-decoder uses one FFN size (model.intermediate_size)"
        )
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if float(getattr(hf_cfg, name, 0.0) or 0.0) > 0:
            raise PtmError(f"{name}={getattr(hf_cfg, name)} (LayerDrop) is not supported by ptmkit's encoder-decoder")
    for name, plain in _PLAIN_BART.items():
        value = getattr(hf_cfg, name, plain)
        if value is not None and bool(value) != plain:
            raise PtmError(f"{name}={value} is not plain BART and is not supported by ptmkit's encoder-decoder")
    if not getattr(hf_cfg, "tie_word_embeddings", True):
        raise PtmError("tie_word_embeddings=false: ptmkit ties the LM head to the shared embeddings")
    pad = hf_cfg.pad_token_id
    if pad is None:
        raise PtmError("the BART config has no pad_token_id; ptmkit needs one to pad sources and targets")
    start = hf_cfg.decoder_start_token_id
    if start is None:
        start = hf_cfg.eos_token_id
    if not isinstance(start, int):
        raise PtmError(f"decoder_start_token_id={start!r}: ptmkit needs one decoder start token id")
    return EncoderDecoderConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.d_model,
        encoder_layers=hf_cfg.encoder_layers,
        decoder_layers=hf_cfg.decoder_layers,
        num_heads=hf_cfg.encoder_attention_heads,
        intermediate_size=hf_cfg.encoder_ffn_dim,
        max_position=hf_cfg.max_position_embeddings,
        activation=activation_from_hf(hf_cfg.activation_function, "BART"),
        dropout=float(hf_cfg.dropout),
        attention_dropout=float(hf_cfg.attention_dropout),
        activation_dropout=float(hf_cfg.activation_dropout),
        layer_norm_eps=HF_LAYER_NORM_EPS,
        init_std=float(hf_cfg.init_std),
        scale_embedding=bool(hf_cfg.scale_embedding),
        embedding_norm=True,
        pad_token_id=int(pad),
        decoder_start_token_id=int(start),
    )


# -- key map -------------------------------------------------------------------------------------
def _pairs(cfg: EncoderDecoderConfig) -> list[tuple[str, str]]:
    """(ptmkit key, HF key) for every tensor copied one-to-one (everything but the stacked projections)."""
    pairs = [("backbone.word_embeddings.weight", "model.shared.weight")]
    for half in ("encoder", "decoder"):
        pairs.append((f"backbone.{half}.position_embeddings.weight", f"model.{half}.embed_positions.weight"))
        pairs += [(f"backbone.{half}.embedding_norm.{p}", f"model.{half}.layernorm_embedding.{p}") for p in _WB]
    for i in range(cfg.encoder_layers):
        ours, theirs = f"backbone.encoder.layers.{i}", f"model.encoder.layers.{i}"
        for a, b in (("attn.out", "self_attn.out_proj"), ("attn_norm", "self_attn_layer_norm"), ("ffn.fc1", "fc1"),
                     ("ffn.fc2", "fc2"), ("ffn_norm", "final_layer_norm")):
            pairs += [(f"{ours}.{a}.{p}", f"{theirs}.{b}.{p}") for p in _WB]
    for j in range(cfg.decoder_layers):
        ours, theirs = f"backbone.decoder.layers.{j}", f"model.decoder.layers.{j}"
        for a, b in (("self_attn.out", "self_attn.out_proj"), ("self_attn_norm", "self_attn_layer_norm"),
                     ("cross_attn.q", "encoder_attn.q_proj"), ("cross_attn.out", "encoder_attn.out_proj"),
                     ("cross_attn_norm", "encoder_attn_layer_norm"), ("ffn.fc1", "fc1"), ("ffn.fc2", "fc2"),
                     ("ffn_norm", "final_layer_norm")):
            pairs += [(f"{ours}.{a}.{p}", f"{theirs}.{b}.{p}") for p in _WB]
    return pairs


def _stacked(cfg: EncoderDecoderConfig) -> list[tuple[str, tuple[str, ...]]]:
    """(ptmkit fused projection, the HF projections stacked into it, in order)."""
    out = []
    for i in range(cfg.encoder_layers):
        theirs = f"model.encoder.layers.{i}.self_attn"
        out.append((f"backbone.encoder.layers.{i}.attn.qkv", tuple(f"{theirs}.{n}_proj" for n in "qkv")))
    for j in range(cfg.decoder_layers):
        ours, theirs = f"backbone.decoder.layers.{j}", f"model.decoder.layers.{j}"
        out.append((f"{ours}.self_attn.qkv", tuple(f"{theirs}.self_attn.{n}_proj" for n in "qkv")))
        out.append((f"{ours}.cross_attn.kv", tuple(f"{theirs}.encoder_attn.{n}_proj" for n in "kv")))
    return out


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``BartForConditionalGeneration`` keys (tied copies left to HF)."""
    out = {hf: state[ours].detach().clone() for ours, hf in _pairs(cfg)}
    for ours, theirs in _stacked(cfg):
        for p in _WB:
            for name, part in zip(theirs, state[f"{ours}.{p}"].detach().chunk(len(theirs), dim=0)):
                out[f"{name}.{p}"] = part.clone()
    out["final_logits_bias"] = state["backbone.final_logits_bias"].detach().reshape(1, -1).clone()
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF BART state dict (``model.*`` keys, ``final_logits_bias``) -> PretrainModel keys."""
    missing = [k for _, k in _pairs(cfg) if k not in hf]
    missing += [f"{n}.{p}" for _, names in _stacked(cfg) for n in names for p in _WB if f"{n}.{p}" not in hf]
    if missing:
        raise PtmError(f"the BART checkpoint lacks {', '.join(missing[:4])}")
    out = {ours: hf[key].detach().float().clone() for ours, key in _pairs(cfg)}
    for ours, theirs in _stacked(cfg):
        for p in _WB:
            out[f"{ours}.{p}"] = torch.cat([hf[f"{n}.{p}"].detach().float() for n in theirs], dim=0)
    bias = hf.get("final_logits_bias")
    out["backbone.final_logits_bias"] = (
        bias.detach().float().reshape(-1).clone() if bias is not None else torch.zeros(cfg.vocab_size)
    )
    return out


def _with_model_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``BartModel`` keys have no ``model.`` prefix; add it so one key map serves both classes."""
    return {(k if k.startswith(("model.", "lm_head.", "final_logits_bias")) else f"model.{k}"): v for k, v in state.items()}


# -- export --------------------------------------------------------------------------------------
def build_hf_bart(pretrained: Any) -> Any:
    """A ``BartForConditionalGeneration`` (eval mode) holding ``pretrained``'s weights."""
    BartForConditionalGeneration = hf("BartForConditionalGeneration")

    cfg = pretrained.backbone.config
    hf_cfg = to_hf_config(cfg, pretrained.tokenizer)
    objective_params = list(pretrained.objective.state_dict()) if pretrained.objective is not None else []
    if objective_params:
        raise PtmError(
            f"the objective has its own parameters ({', '.join(objective_params[:3])}); BART's only head is the "
            f"tied LM head, so only encoder-decoders trained with the bart objective export as BART"
        )
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    hf_state = state_dict_to_hf(state, cfg)
    with quiet_transformers():
        model = BartForConditionalGeneration(hf_cfg)
    result = model.load_state_dict(hf_state, strict=False)
    tied = {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise PtmError(f"cannot export as BART: unmatched keys {result.missing_keys[:3]} {result.unexpected_keys[:3]}")
    model.tie_weights()
    return model.eval()


def export_bart(pretrained: Any, out_dir: str | Path) -> Path:
    """Write ``pretrained`` as an HF ``BartForConditionalGeneration`` directory (``BartModel`` loads
    it too), with the tokenizer files."""
    model = build_hf_bart(pretrained)
    return write_hf_dir(model, pretrained, out_dir)


# -- import --------------------------------------------------------------------------------------
def import_bart(
    hf_dir_or_model: str | Path | Any, tokenizer: Any = None
) -> tuple[EncoderDecoderConfig, dict[str, torch.Tensor], Any]:
    """An HF BART directory or model -> ``(EncoderDecoderConfig, PretrainModel state dict, tokenizer)``.

    The state dict holds ``backbone.*`` only (the LM head is the tied embeddings; a missing
    ``final_logits_bias`` imports as zeros).  An LM head or encoder/decoder token table not tied to
    ``model.shared`` raises :class:`PtmError`.
    """
    BartForConditionalGeneration = hf("BartForConditionalGeneration")

    hf_model, present, tokenizer, hf_dir = read_hf(BartForConditionalGeneration, hf_dir_or_model, tokenizer)
    hf_state = _with_model_prefix(present)
    cfg = from_hf_config(hf_model.config)
    if "model.shared.weight" not in hf_state:
        raise PtmError("the BART checkpoint lacks model.shared.weight (the shared token embeddings)")
    shared = hf_state["model.shared.weight"]
    check_tied(hf_state.get("lm_head.weight"), shared, "lm_head")
    for half in ("encoder", "decoder"):
        check_tied(hf_state.get(f"model.{half}.embed_tokens.weight"), shared, f"{half}.embed_tokens")
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def objective_section() -> dict[str, Any]:
    return {"name": "bart", **to_dict(DenoisingConfig())}


def load_hf_bart(hf_dir: str | Path) -> Any:
    """Import an HF BART directory as a ready ``Pretrained`` (encoder-decoder + bart objective, eval mode)."""
    cfg, state, tokenizer = import_bart(hf_dir)
    check_pad(cfg.pad_token_id, tokenizer)
    return assemble(cfg, objective_section(), state, tokenizer, source=str(hf_dir))


@register("hf_family", "bart")
class BartFamily(HFFamily):
    """Encoder-decoders trained with the bart objective <-> ``BartForConditionalGeneration``."""

    formats = ("bart",)
    model_types = ("bart",)

    def format_for(self, pretrained: Any) -> str | None:
        return None if problems(pretrained.backbone.config) else "bart"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return export_bart(pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_bart(hf_dir)
