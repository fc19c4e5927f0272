"""T5 <-> HF transformers (``T5ForConditionalGeneration``).

The key map (ptmkit name on the left, HF on the right; ``E`` = ``encoder.block.{i}.layer``,
``D`` = ``decoder.block.{j}.layer``)::

    backbone.word_embeddings                      shared (= encoder/decoder embed_tokens = lm_head, tied)
    backbone.encoder.relative_bias.bias [B, h]    encoder.block.0.layer.0.SelfAttention.relative_attention_bias
    backbone.encoder.layers.{i}.attn.qkv [3H, H]  E.0.SelfAttention.{q,k,v} (3 x [H, H], stacked)
    backbone.encoder.layers.{i}.attn.out          E.0.SelfAttention.o
    backbone.encoder.layers.{i}.attn_norm         E.0.layer_norm
    backbone.encoder.layers.{i}.ffn.fc1 / fc2     E.1.DenseReluDense.wi / wo (gated: wi_0, and wi_1 = fc1_linear)
    backbone.encoder.layers.{i}.ffn_norm          E.1.layer_norm
    backbone.encoder.final_norm                   encoder.final_layer_norm
    backbone.decoder.relative_bias.bias           decoder.block.0.layer.0.SelfAttention.relative_attention_bias
    backbone.decoder.layers.{j}.self_attn.qkv     D.0.SelfAttention.{q,k,v} (stacked)
    backbone.decoder.layers.{j}.self_attn.out     D.0.SelfAttention.o
    backbone.decoder.layers.{j}.self_attn_norm    D.0.layer_norm
    backbone.decoder.layers.{j}.cross_attn.q      D.1.EncDecAttention.q
    backbone.decoder.layers.{j}.cross_attn.kv     D.1.EncDecAttention.{k,v} (stacked)
    backbone.decoder.layers.{j}.cross_attn.out    D.1.EncDecAttention.o
    backbone.decoder.layers.{j}.cross_attn_norm   D.1.layer_norm
    backbone.decoder.layers.{j}.ffn.*             D.2.DenseReluDense.*
    backbone.decoder.layers.{j}.ffn_norm          D.2.layer_norm
    backbone.decoder.final_norm                   decoder.final_layer_norm

HF T5 stores each stack's relative position bias in its first layer and shares it with the
others, as ptmkit's stack does; it has no biases, no position tables, no embedding norm and one
dropout rate (exported from ``model.dropout``; dropout does not change the function).  HF T5 ties
the LM head to ``shared`` and rescales the decoder output by ``d_model^-1/2`` when its config says
``tie_word_embeddings`` (T5 v1.0); ptmkit's ``scale_decoder_output`` is that switch.  The decoder
starts from ``decoder_start_token_id`` ([PAD] in the presets, as T5); ptmkit's end token is the
tokenizer's ``[SEP]`` (T5's ``</s>``), which becomes the exported ``eos_token_id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ptmkit.config import to_dict
from ptmkit.encoders.encoder_decoder import EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.interop.hf_common import (
    HFFamily,
    assemble,
    check_pad,
    check_tied,
    hf,
    quiet_transformers,
    read_hf,
    write_hf_dir,
)
from ptmkit.objectives.t5 import SpanCorruptionConfig
from ptmkit.registry import register

# HF ``feed_forward_proj`` -> (ptmkit activation, gated); T5 v1.0 is "relu", v1.1 "gated-gelu" (tanh GELU)
_FFN_FROM_HF = {"relu": ("relu", False), "gated-relu": ("relu", True), "gated-gelu": ("gelu_tanh", True),
                "gelu_new": ("gelu_tanh", False), "gated-gelu_new": ("gelu_tanh", True), "gelu": ("gelu", False)}
_FFN_TO_HF = {("relu", False): "relu", ("relu", True): "gated-relu", ("gelu_tanh", True): "gated-gelu",
              ("gelu_tanh", False): "gelu_new", ("gelu", False): "gelu"}
DEFAULT_MAX_POSITION = 512  # T5's training length; HF T5 configs carry no limit


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any) -> list[str]:
    """What keeps a model from being a T5 (empty when it is one)."""
    if not isinstance(model_cfg, EncoderDecoderConfig):
        return [f"its encoder is not an encoder-decoder ({type(model_cfg).__name__})"]
    wanted = {"norm": "pre", "norm_type": "rms", "bias": False, "positions": "relative", "scale_attention": False,
              "embedding_norm": False, "scale_embedding": False}
    out = [f"{k}={getattr(model_cfg, k)!r} (T5 has {k}={v!r})" for k, v in wanted.items() if getattr(model_cfg, k) != v]
    if (model_cfg.activation, model_cfg.gated_ffn) not in _FFN_TO_HF:
        out.append(f"activation={model_cfg.activation!r} with gated_ffn={model_cfg.gated_ffn} "
                   f"has no HF T5 feed_forward_proj")
    return out


def to_hf_config(model_cfg: EncoderDecoderConfig, tokenizer: Any = None) -> Any:
    """``EncoderDecoderConfig`` -> ``transformers.T5Config``; :class:`PtmError` if T5 cannot express it."""
    T5Config = hf("T5Config")

    found = problems(model_cfg)
    if found:
        raise PtmError("this model cannot be exported as T5: " + "; ".join(found))
    eos = int(tokenizer.sep_id) if tokenizer is not None else 3
    return T5Config(
        vocab_size=model_cfg.vocab_size,
        d_model=model_cfg.hidden_size,
        d_kv=model_cfg.head_dim,
        d_ff=model_cfg.intermediate_size,
        num_layers=model_cfg.encoder_layers,
        num_decoder_layers=model_cfg.decoder_layers,
        num_heads=model_cfg.num_heads,
        relative_attention_num_buckets=model_cfg.relative_buckets,
        relative_attention_max_distance=model_cfg.relative_max_distance,
        dropout_rate=model_cfg.dropout,
        layer_norm_epsilon=model_cfg.layer_norm_eps,
        feed_forward_proj=_FFN_TO_HF[(model_cfg.activation, model_cfg.gated_ffn)],
        pad_token_id=model_cfg.pad_token_id,
        eos_token_id=eos,
        decoder_start_token_id=model_cfg.decoder_start_token_id,
        tie_word_embeddings=model_cfg.scale_decoder_output,  # HF: tied <=> rescaled decoder output
    )


def from_hf_config(hf_cfg: Any) -> EncoderDecoderConfig:
    """``transformers.T5Config`` -> ``EncoderDecoderConfig``; :class:`PtmError` naming the setting
    for anything ptmkit's encoder-decoder does not implement."""
    if getattr(hf_cfg, "model_type", "t5") != "t5":
        raise PtmError(f"expected a T5 checkpoint (model_type 't5'), got model_type {hf_cfg.model_type!r}")
    if hf_cfg.d_kv * hf_cfg.num_heads != hf_cfg.d_model:
        raise PtmError(
            f"d_kv={hf_cfg.d_kv} x num_heads={hf_cfg.num_heads} != d_model={hf_cfg.d_model}; ptmkit's attention "
            f"uses heads of d_model / num_heads"
        )
    proj = hf_cfg.feed_forward_proj
    if proj not in _FFN_FROM_HF:
        raise PtmError(f"feed_forward_proj={proj!r} is not supported; supported: {', '.join(sorted(_FFN_FROM_HF))}")
    activation, gated = _FFN_FROM_HF[proj]
    start = hf_cfg.decoder_start_token_id
    if start is None:
        start = hf_cfg.pad_token_id
    if hf_cfg.pad_token_id is None or not isinstance(start, int):
        raise PtmError("the T5 config needs a pad_token_id and one decoder_start_token_id")
    dropout = float(hf_cfg.dropout_rate)
    return EncoderDecoderConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.d_model,
        encoder_layers=hf_cfg.num_layers,
        decoder_layers=hf_cfg.num_decoder_layers,
        num_heads=hf_cfg.num_heads,
        intermediate_size=hf_cfg.d_ff,
        max_position=int(getattr(hf_cfg, "n_positions", None) or DEFAULT_MAX_POSITION),
        activation=activation,
        dropout=dropout,
        attention_dropout=dropout,
        activation_dropout=dropout,
        layer_norm_eps=float(hf_cfg.layer_norm_epsilon),
        scale_embedding=False,
        embedding_norm=False,
        pad_token_id=int(hf_cfg.pad_token_id),
        decoder_start_token_id=int(start),
        norm="pre",
        norm_type="rms",
        bias=False,
        positions="relative",
        relative_buckets=int(hf_cfg.relative_attention_num_buckets),
        relative_max_distance=int(hf_cfg.relative_attention_max_distance),
        scale_attention=False,
        gated_ffn=gated,
        scale_decoder_output=bool(getattr(hf_cfg, "scale_decoder_outputs", getattr(hf_cfg, "tie_word_embeddings", True))),
        init="t5",
    )


# -- key map -------------------------------------------------------------------------------------
def _ffn(cfg: EncoderDecoderConfig, ours: str, theirs: str) -> list[tuple[str, str]]:
    if cfg.gated_ffn:
        parts = (("fc1", "wi_0"), ("fc1_linear", "wi_1"), ("fc2", "wo"))
    else:
        parts = (("fc1", "wi"), ("fc2", "wo"))
    return [(f"{ours}.ffn.{a}.weight", f"{theirs}.DenseReluDense.{b}.weight") for a, b in parts]


def _pairs(cfg: EncoderDecoderConfig) -> list[tuple[str, str]]:
    """(ptmkit key, HF key) for every tensor copied one-to-one (everything but the stacked projections)."""
    pairs = [("backbone.word_embeddings.weight", "shared.weight")]
    for half in ("encoder", "decoder"):
        pairs.append((f"backbone.{half}.relative_bias.bias.weight",
                      f"{half}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"))
        pairs.append((f"backbone.{half}.final_norm.weight", f"{half}.final_layer_norm.weight"))
    for i in range(cfg.encoder_layers):
        ours, theirs = f"backbone.encoder.layers.{i}", f"encoder.block.{i}.layer"
        pairs += [(f"{ours}.attn.out.weight", f"{theirs}.0.SelfAttention.o.weight"),
                  (f"{ours}.attn_norm.weight", f"{theirs}.0.layer_norm.weight"),
                  (f"{ours}.ffn_norm.weight", f"{theirs}.1.layer_norm.weight")]
        pairs += _ffn(cfg, ours, f"{theirs}.1")
    for j in range(cfg.decoder_layers):
        ours, theirs = f"backbone.decoder.layers.{j}", f"decoder.block.{j}.layer"
        pairs += [(f"{ours}.self_attn.out.weight", f"{theirs}.0.SelfAttention.o.weight"),
                  (f"{ours}.self_attn_norm.weight", f"{theirs}.0.layer_norm.weight"),
                  (f"{ours}.cross_attn.q.weight", f"{theirs}.1.EncDecAttention.q.weight"),
                  (f"{ours}.cross_attn.out.weight", f"{theirs}.1.EncDecAttention.o.weight"),
                  (f"{ours}.cross_attn_norm.weight", f"{theirs}.1.layer_norm.weight"),
                  (f"{ours}.ffn_norm.weight", f"{theirs}.2.layer_norm.weight")]
        pairs += _ffn(cfg, ours, f"{theirs}.2")
    return pairs


def _stacked(cfg: EncoderDecoderConfig) -> list[tuple[str, tuple[str, ...]]]:
    """(ptmkit fused projection weight, the HF projection weights stacked into it, in order)."""
    out = []
    for i in range(cfg.encoder_layers):
        theirs = f"encoder.block.{i}.layer.0.SelfAttention"
        out.append((f"backbone.encoder.layers.{i}.attn.qkv.weight", tuple(f"{theirs}.{n}.weight" for n in "qkv")))
    for j in range(cfg.decoder_layers):
        ours, theirs = f"backbone.decoder.layers.{j}", f"decoder.block.{j}.layer"
        out.append((f"{ours}.self_attn.qkv.weight", tuple(f"{theirs}.0.SelfAttention.{n}.weight" for n in "qkv")))
        out.append((f"{ours}.cross_attn.kv.weight", tuple(f"{theirs}.1.EncDecAttention.{n}.weight" for n in "kv")))
    return out


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``T5ForConditionalGeneration`` keys (tied copies left to HF).
    A non-zero ``final_logits_bias`` has no place in T5 and is refused."""
    bias = state.get("backbone.final_logits_bias")
    if bias is not None and bool(bias.any()):
        raise PtmError("the model's final_logits_bias is not zero and T5 has no output bias; it cannot be exported as T5")
    out = {hf: state[ours].detach().clone() for ours, hf in _pairs(cfg)}
    for ours, theirs in _stacked(cfg):
        for name, part in zip(theirs, state[ours].detach().chunk(len(theirs), dim=0)):
            out[name] = part.clone()
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF T5 state dict -> PretrainModel keys (``final_logits_bias`` zero, as T5 has none)."""
    missing = [k for _, k in _pairs(cfg) if k not in hf]
    missing += [n for _, names in _stacked(cfg) for n in names if n not in hf]
    if missing:
        raise PtmError(f"the T5 checkpoint lacks {', '.join(missing[:4])}")
    out = {ours: hf[key].detach().float().clone() for ours, key in _pairs(cfg)}
    for ours, theirs in _stacked(cfg):
        out[ours] = torch.cat([hf[n].detach().float() for n in theirs], dim=0)
    out["backbone.final_logits_bias"] = torch.zeros(cfg.vocab_size)
    return out


# -- export --------------------------------------------------------------------------------------
def build_hf_t5(pretrained: Any) -> Any:
    """A ``T5ForConditionalGeneration`` (eval mode) holding ``pretrained``'s weights."""
    T5ForConditionalGeneration = hf("T5ForConditionalGeneration")

    cfg = pretrained.backbone.config
    hf_cfg = to_hf_config(cfg, pretrained.tokenizer)
    objective_params = list(pretrained.objective.state_dict()) if pretrained.objective is not None else []
    if objective_params:
        raise PtmError(
            f"the objective has its own parameters ({', '.join(objective_params[:3])}); T5's only head is the "
            f"tied LM head, so only encoder-decoders trained without extra heads export as T5"
        )
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    hf_state = state_dict_to_hf(state, cfg)
    with quiet_transformers():
        model = T5ForConditionalGeneration(hf_cfg)
    result = model.load_state_dict(hf_state, strict=False)
    tied = {"lm_head.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise PtmError(f"cannot export as T5: unmatched keys {result.missing_keys[:3]} {result.unexpected_keys[:3]}")
    model.tie_weights()
    return model.eval()


def export_t5(pretrained: Any, out_dir: str | Path) -> Path:
    """Write ``pretrained`` as an HF ``T5ForConditionalGeneration`` directory, with the tokenizer files."""
    return write_hf_dir(build_hf_t5(pretrained), pretrained, out_dir)


# -- import --------------------------------------------------------------------------------------
def import_t5(
    hf_dir_or_model: str | Path | Any, tokenizer: Any = None
) -> tuple[EncoderDecoderConfig, dict[str, torch.Tensor], Any]:
    """An HF T5 directory or model -> ``(EncoderDecoderConfig, PretrainModel state dict, tokenizer)``.

    The LM head and both stacks' token tables must be ``shared`` (ptmkit ties them); an untied
    checkpoint raises :class:`PtmError`.
    """
    T5ForConditionalGeneration = hf("T5ForConditionalGeneration")

    hf_model, present, tokenizer, hf_dir = read_hf(T5ForConditionalGeneration, hf_dir_or_model, tokenizer)
    cfg = from_hf_config(hf_model.config)
    if "shared.weight" not in present:
        raise PtmError("the T5 checkpoint lacks shared.weight (the shared token embeddings)")
    shared = present["shared.weight"]
    check_tied(present.get("lm_head.weight"), shared, "lm_head")
    for half in ("encoder", "decoder"):
        check_tied(present.get(f"{half}.embed_tokens.weight"), shared, f"{half}.embed_tokens")
    return cfg, state_dict_from_hf(present, cfg), tokenizer


def objective_section() -> dict[str, Any]:
    return {"name": "t5", **to_dict(SpanCorruptionConfig())}


def load_hf_t5(hf_dir: str | Path) -> Any:
    """Import an HF T5 directory as a ready ``Pretrained`` (encoder-decoder + t5 objective, eval mode)."""
    cfg, state, tokenizer = import_t5(hf_dir)
    check_pad(cfg.pad_token_id, tokenizer)
    return assemble(cfg, objective_section(), state, tokenizer, source=str(hf_dir))


@register("hf_family", "t5")
class T5Family(HFFamily):
    """T5-configured encoder-decoders <-> ``T5ForConditionalGeneration``."""

    formats = ("t5",)
    model_types = ("t5",)

    def format_for(self, pretrained: Any) -> str | None:
        return None if problems(pretrained.backbone.config) else "t5"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return export_t5(pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_t5(hf_dir)
