"""GPT-2 <-> HF transformers (``GPT2Model``, ``GPT2LMHeadModel``).

The key map (ptmkit name on the left, HF on the right, ``h`` = ``transformer.h.{i}``)::

    backbone.embeddings.word_embeddings          transformer.wte   (= lm_head, tied)
    backbone.embeddings.position_embeddings      transformer.wpe
    backbone.layers.{i}.attn_norm                h.ln_1
    backbone.layers.{i}.attn.qkv   [3H, H]       h.attn.c_attn     [H, 3H]  (transposed)
    backbone.layers.{i}.attn.out   [H, H]        h.attn.c_proj     [H, H]   (transposed)
    backbone.layers.{i}.ffn_norm                 h.ln_2
    backbone.layers.{i}.ffn.fc1    [I, H]        h.mlp.c_fc        [H, I]   (transposed)
    backbone.layers.{i}.ffn.fc2    [H, I]        h.mlp.c_proj      [I, H]   (transposed)
    backbone.final_norm                          transformer.ln_f

HF's GPT-2 uses ``Conv1D`` layers, ``y = x W + b`` with ``W [in, out]``: the transpose of
``nn.Linear``'s ``[out, in]``.  ``c_attn``'s output is q, k, v concatenated in that order, the
same stacking as ptmkit's ``qkv``, so the fused matrix maps with one transpose.  GPT-2 is pre-LN
with a final LayerNorm, eps 1e-5 and the tanh GELU (``gelu_new``); the causal LM head is tied.

A fine-tuned causal tagger exports its encoder by this map and its linear head as
``GPT2ForTokenClassification``'s ``classifier``.  ``GPT2ForSequenceClassification``'s ``score``
layer has no bias (ptmkit's classifier has one), so classifiers are not exported as GPT-2.
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
    ACT_TO_HF,
    HFFamily,
    TaskHead,
    activation_from_hf,
    assemble,
    check_tied,
    hf,
    read_hf,
    task_model,
    write_hf_dir,
)
from ptmkit.objectives.clm import CLMConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

_WB = ("weight", "bias")  # the two tensors of a Linear or LayerNorm


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = True) -> list[str]:
    """What keeps a model from being a GPT-2 (empty when it is one)."""
    if not isinstance(model_cfg, TransformerConfig):
        return [f"its encoder is not a Transformer ({type(model_cfg).__name__})"]
    out = []
    if model_cfg.norm != "pre":
        out.append(f"norm={model_cfg.norm!r} (GPT-2 is pre-LN; export a post-LN encoder with --format bert)")
    if not causal:
        out.append("its objective reads in both directions (GPT-2 attends to the left only)")
    if model_cfg.embedding_norm:
        out.append("embedding_norm=true (GPT-2 has no LayerNorm after the embeddings)")
    if model_cfg.type_vocab_size > 0:
        out.append(f"type_vocab_size={model_cfg.type_vocab_size} (GPT-2 has no segment embeddings)")
    if model_cfg.positions != "absolute" or model_cfg.embedding_size is not None or model_cfg.sharing != "none":
        out.append("relative positions, factorized embeddings or shared layers (not part of GPT-2)")
    if model_cfg.llama_options():
        out.append(f"{', '.join(model_cfg.llama_options())} (not part of GPT-2)")
    return out


def to_hf_config(model_cfg: TransformerConfig, eos_token_id: int | None = None, causal: bool = True) -> Any:
    """``TransformerConfig`` -> ``transformers.GPT2Config``; :class:`PtmError` if GPT-2 cannot express it."""
    GPT2Config = hf("GPT2Config")

    found = problems(model_cfg, causal)
    if found:
        raise PtmError("this model cannot be exported as GPT-2: " + "; ".join(found))
    return GPT2Config(
        vocab_size=model_cfg.vocab_size,
        n_positions=model_cfg.max_position,
        n_embd=model_cfg.hidden_size,
        n_layer=model_cfg.num_layers,
        n_head=model_cfg.num_heads,
        n_inner=model_cfg.intermediate_size,
        activation_function=ACT_TO_HF[model_cfg.activation],
        resid_pdrop=model_cfg.dropout,
        embd_pdrop=model_cfg.dropout,
        attn_pdrop=model_cfg.attention_dropout,
        layer_norm_epsilon=model_cfg.layer_norm_eps,
        initializer_range=model_cfg.init_std,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=model_cfg.pad_token_id,
        tie_word_embeddings=True,
    )


def from_hf_config(hf_cfg: Any) -> TransformerConfig:
    """``transformers.GPT2Config`` -> ``TransformerConfig``; :class:`PtmError` for what ptmkit lacks."""
    if getattr(hf_cfg, "model_type", "gpt2") != "gpt2":
        raise PtmError(f"expected a GPT-2 checkpoint (model_type 'gpt2'), got model_type {hf_cfg.model_type!r}")
    if not getattr(hf_cfg, "scale_attn_weights", True):
        raise PtmError("scale_attn_weights=false (unscaled attention) is not supported; ptmkit divides by sqrt(d)")
    if getattr(hf_cfg, "scale_attn_by_inverse_layer_idx", False):
        raise PtmError("scale_attn_by_inverse_layer_idx=true is not supported by ptmkit's attention")
    if getattr(hf_cfg, "add_cross_attention", False):
        raise PtmError("GPT-2 with cross-attention is not supported; import a decoder-only model")
    pad = hf_cfg.pad_token_id
    if pad is None or not 0 <= pad < hf_cfg.vocab_size:
        pad = 0  # GPT-2 has no padding token; ptmkit masks padding by attention_mask anyway
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.n_embd,
        num_layers=hf_cfg.n_layer,
        num_heads=hf_cfg.n_head,
        intermediate_size=hf_cfg.n_inner or 4 * hf_cfg.n_embd,
        max_position=hf_cfg.n_positions,
        type_vocab_size=0,
        norm="pre",
        activation=activation_from_hf(hf_cfg.activation_function, "GPT-2"),
        layer_norm_eps=float(hf_cfg.layer_norm_epsilon),
        dropout=float(hf_cfg.resid_pdrop),
        attention_dropout=float(hf_cfg.attn_pdrop),
        embedding_norm=False,
        pooler=False,
        init_std=float(hf_cfg.initializer_range),
        scaled_residual_init=True,
        pad_token_id=int(pad),
    )


# -- key map -------------------------------------------------------------------------------------
def _pairs(cfg: TransformerConfig) -> list[tuple[str, str, bool]]:
    """(ptmkit key, HF key, transposed) for every tensor."""
    pairs = [
        ("backbone.embeddings.word_embeddings.weight", "transformer.wte.weight", False),
        ("backbone.embeddings.position_embeddings.weight", "transformer.wpe.weight", False),
    ]
    for i in range(cfg.num_layers):
        ours, theirs = f"backbone.layers.{i}", f"transformer.h.{i}"
        for a, b, linear in (
            ("attn_norm", "ln_1", False),
            ("attn.qkv", "attn.c_attn", True),
            ("attn.out", "attn.c_proj", True),
            ("ffn_norm", "ln_2", False),
            ("ffn.fc1", "mlp.c_fc", True),
            ("ffn.fc2", "mlp.c_proj", True),
        ):
            pairs.append((f"{ours}.{a}.weight", f"{theirs}.{b}.weight", linear))  # Conv1D: [in, out]
            pairs.append((f"{ours}.{a}.bias", f"{theirs}.{b}.bias", False))
    pairs += [(f"backbone.final_norm.{p}", f"transformer.ln_f.{p}", False) for p in _WB]
    return pairs


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``GPT2LMHeadModel`` keys (the tied ``lm_head`` left out)."""
    out = {}
    for ours, theirs, transpose in _pairs(cfg):
        t = state[ours].detach()
        out[theirs] = (t.t() if transpose else t).contiguous().clone()
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF GPT-2 state dict (``transformer.*`` keys) -> PretrainModel keys (``backbone.*``)."""
    out = {}
    for ours, theirs, transpose in _pairs(cfg):
        if theirs not in hf:
            raise PtmError(f"the GPT-2 checkpoint lacks {theirs}")
        t = hf[theirs].detach().float()
        out[ours] = (t.t() if transpose else t).contiguous().clone()
    return out


def _with_transformer_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``GPT2Model`` keys have no ``transformer.`` prefix; add it so one key map serves both classes."""
    return {(k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}"): v for k, v in state.items()}


# -- export --------------------------------------------------------------------------------------
def build_hf_gpt2(pretrained: Any) -> Any:
    """A ``GPT2LMHeadModel`` (eval mode) holding ``pretrained``'s backbone; the LM head is tied."""
    GPT2LMHeadModel = hf("GPT2LMHeadModel")

    cfg: TransformerConfig = pretrained.backbone.config
    tok = pretrained.tokenizer
    eos = None
    if tok is not None:
        eos = getattr(tok, "eos_id", None)
        eos = int(eos if eos is not None else tok.sep_id)
    hf_cfg = to_hf_config(cfg, eos_token_id=eos, causal=pretrained.causal)
    if cfg.pooler:
        log.warning("GPT-2 has no pooler; the model's pooler is not exported")
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    objective_params = list(pretrained.objective.state_dict()) if pretrained.objective is not None else []
    if objective_params:
        raise PtmError(
            f"the objective has its own parameters ({', '.join(objective_params[:3])}); GPT-2's only head is "
            f"the tied LM head, so only models trained with the clm objective export as GPT-2"
        )
    model = GPT2LMHeadModel(hf_cfg)
    hf_state = state_dict_to_hf(state, cfg)
    result = model.load_state_dict(hf_state, strict=False)
    if set(result.missing_keys) - {"lm_head.weight"} or result.unexpected_keys:
        raise PtmError(f"cannot export as GPT-2: unmatched keys {result.missing_keys[:3]} {result.unexpected_keys[:3]}")
    model.tie_weights()
    return model.eval()


def export_gpt2(pretrained: Any, out_dir: str | Path, with_heads: bool = True) -> Path:
    """Write ``pretrained`` as an HF ``GPT2LMHeadModel`` directory (``GPT2Model`` loads it too),
    with the tokenizer files.  ``with_heads`` is accepted for symmetry: the LM head is tied, so
    the files are the same either way."""
    model = build_hf_gpt2(pretrained)
    return write_hf_dir(model, pretrained, out_dir)


# -- fine-tuned task models -----------------------------------------------------------------------
TASK_CLASSES = {"token_classification": "GPT2ForTokenClassification"}


def build_hf_gpt2_task(pretrained: Any, head: TaskHead) -> Any:
    """An HF ``GPT2ForTokenClassification`` (eval mode) holding ``pretrained``'s encoder and ``head``."""
    cfg: TransformerConfig = pretrained.backbone.config
    eos = getattr(pretrained.tokenizer, "eos_id", None)
    eos = int(eos if eos is not None else pretrained.tokenizer.sep_id)
    state = state_dict_to_hf({f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}, cfg)
    state.update(head.tensors("classifier"))
    return task_model(TASK_CLASSES[head.kind], to_hf_config(cfg, eos_token_id=eos, causal=pretrained.causal), head, state)


# -- import --------------------------------------------------------------------------------------
def import_gpt2(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF GPT-2 directory or model -> ``(TransformerConfig, PretrainModel state dict, tokenizer)``.

    The state dict holds ``backbone.*`` only: the causal LM head is the tied word embeddings.
    An untied ``lm_head`` raises :class:`PtmError`.
    """
    GPT2LMHeadModel = hf("GPT2LMHeadModel")

    hf_model, present, tokenizer, hf_dir = read_hf(GPT2LMHeadModel, hf_dir_or_model, tokenizer)
    hf_state = _with_transformer_prefix(present)
    cfg = from_hf_config(hf_model.config)
    check_tied(hf_state.get("lm_head.weight"), hf_state["transformer.wte.weight"], "lm_head")
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def objective_section() -> dict[str, Any]:
    return {"name": "clm", **to_dict(CLMConfig())}


def load_hf_gpt2(hf_dir: str | Path) -> Any:
    """Import an HF GPT-2 directory as a ready ``Pretrained`` (backbone + clm objective, eval mode)."""
    cfg, state, tokenizer = import_gpt2(hf_dir)
    return assemble(cfg, objective_section(), state, tokenizer, source=str(hf_dir))


@register("hf_family", "gpt2")
class GPT2Family(HFFamily):
    """Pre-LN causal Transformers trained with a tied LM head <-> ``GPT2LMHeadModel``."""

    formats = ("gpt2",)
    model_types = ("gpt2",)

    def format_for(self, pretrained: Any) -> str | None:
        return None if problems(pretrained.backbone.config, pretrained.causal) else "gpt2"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return export_gpt2(pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_gpt2(hf_dir)

    task_classes = TASK_CLASSES

    def task_problems(self, pretrained: Any, head: TaskHead) -> list[str]:
        return problems(pretrained.backbone.config, pretrained.causal)

    def export_task(self, pretrained: Any, head: TaskHead, out_dir: str | Path) -> Path:
        return write_hf_dir(build_hf_gpt2_task(pretrained, head), pretrained, out_dir)
