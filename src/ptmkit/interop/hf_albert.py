"""ALBERT <-> HF transformers (``AlbertModel``, ``AlbertForMaskedLM``, ``AlbertForPreTraining``).

The key map (ptmkit on the left; ``G`` = ``albert.encoder.albert_layer_groups.{g}.albert_layers.0``,
one group shared by all layers with ``sharing=all``, one group per layer with ``sharing=none``)::

    backbone.embeddings.word_embeddings [V, E]  albert.embeddings.word_embeddings
    backbone.embeddings.position_embeddings     albert.embeddings.position_embeddings
    backbone.embeddings.token_type_embeddings   albert.embeddings.token_type_embeddings
    backbone.embeddings.norm                    albert.embeddings.LayerNorm
    backbone.embeddings.project (E -> H)        albert.encoder.embedding_hidden_mapping_in
    backbone.layers.{g}.attn.qkv [3H, H]        G.attention.{query,key,value} (3 x [H, H], stacked)
    backbone.layers.{g}.attn.out                G.attention.dense
    backbone.layers.{g}.attn_norm               G.attention.LayerNorm
    backbone.layers.{g}.ffn.fc1                 G.ffn
    backbone.layers.{g}.ffn.fc2                 G.ffn_output
    backbone.layers.{g}.ffn_norm                G.full_layer_layer_norm
    backbone.pooler.dense                       albert.pooler
    objective.mlm_head.dense (H -> E)           predictions.dense
    objective.mlm_head.norm                     predictions.LayerNorm
    objective.mlm_head.bias [V]                 predictions.bias (= predictions.decoder.bias)
    (tied to word_embeddings)                   predictions.decoder.weight
    objective.sop_head                          sop_classifier.classifier

HF ALBERT always has the ``E -> H`` mapping; a ptmkit model with ``E = H`` (no projection) exports
the identity, and imports only an identity mapping.  Sharing of only the attention or only the
feed-forward sub-layer has no HF form.  The family claims models that BERT cannot express
(factorized embeddings or all layers shared) and those of the ``albert`` objective.

A fine-tuned task model exports its encoder by this map and its linear head as ``classifier``
(``AlbertForSequenceClassification`` over the pooler, ``AlbertForTokenClassification``) or
``qa_outputs`` (``AlbertForQuestionAnswering``).
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
    export_heads,
    hf,
    read_hf,
    task_model,
    write_hf_dir,
)
from ptmkit.objectives.albert import ALBERTConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

_WB = ("weight", "bias")
_MAPPING = "albert.encoder.embedding_hidden_mapping_in"


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = False) -> list[str]:
    """What keeps a model from being an ALBERT (empty when it is one)."""
    if not isinstance(model_cfg, TransformerConfig):
        return [f"its encoder is not a Transformer ({type(model_cfg).__name__})"]
    out = []
    if model_cfg.norm != "post":
        out.append(f"norm={model_cfg.norm!r} (ALBERT is post-LN)")
    if causal:
        out.append("its objective reads left to right (ALBERT attends in both directions)")
    if model_cfg.positions != "absolute":
        out.append(f"positions={model_cfg.positions!r} (ALBERT learns absolute positions)")
    if model_cfg.sharing not in ("all", "none"):
        out.append(f"sharing={model_cfg.sharing!r} (ALBERT shares all of a layer or nothing)")
    if not model_cfg.embedding_norm:
        out.append("embedding_norm=false (ALBERT always normalises the embedding sum)")
    if model_cfg.llama_options():
        out.append(f"{', '.join(model_cfg.llama_options())} (not part of ALBERT)")
    return out


def n_groups(cfg: TransformerConfig) -> int:
    """HF ``num_hidden_groups``: 1 when every layer shares one set of weights, else one per layer."""
    return 1 if cfg.sharing == "all" else cfg.num_layers


def to_hf_config(model_cfg: TransformerConfig, causal: bool = False) -> Any:
    """``TransformerConfig`` -> ``transformers.AlbertConfig``; :class:`PtmError` if ALBERT cannot express it."""
    AlbertConfig = hf("AlbertConfig")

    found = problems(model_cfg, causal)
    if found:
        raise PtmError("this model cannot be exported as ALBERT: " + "; ".join(found))
    return AlbertConfig(
        vocab_size=model_cfg.vocab_size,
        embedding_size=model_cfg.embedding_dim,
        hidden_size=model_cfg.hidden_size,
        num_hidden_layers=model_cfg.num_layers,
        num_hidden_groups=n_groups(model_cfg),
        inner_group_num=1,
        num_attention_heads=model_cfg.num_heads,
        intermediate_size=model_cfg.intermediate_size,
        hidden_act=ACT_TO_HF[model_cfg.activation],
        hidden_dropout_prob=model_cfg.dropout,
        attention_probs_dropout_prob=model_cfg.attention_dropout,
        classifier_dropout_prob=model_cfg.dropout,
        max_position_embeddings=model_cfg.max_position,
        type_vocab_size=max(model_cfg.type_vocab_size, 1),
        initializer_range=model_cfg.init_std,
        layer_norm_eps=model_cfg.layer_norm_eps,
        pad_token_id=model_cfg.pad_token_id,
        tie_word_embeddings=True,
    )


def from_hf_config(hf_cfg: Any, pooler: bool, project: bool) -> TransformerConfig:
    """``transformers.AlbertConfig`` -> ``TransformerConfig``; :class:`PtmError` for what ptmkit lacks."""
    if getattr(hf_cfg, "model_type", "albert") != "albert":
        raise PtmError(f"expected an ALBERT checkpoint (model_type 'albert'), got model_type {hf_cfg.model_type!r}")
    if getattr(hf_cfg, "inner_group_num", 1) != 1:
        raise PtmError(f"inner_group_num={hf_cfg.inner_group_num} is not supported; ptmkit's ALBERT has one layer per group")
    groups, L = hf_cfg.num_hidden_groups, hf_cfg.num_hidden_layers
    if groups not in (1, L):
        raise PtmError(f"num_hidden_groups={groups} of {L} layers is not supported; ptmkit shares all layers or none")
    pos = getattr(hf_cfg, "position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise PtmError(f"position_embedding_type={pos!r} is not supported; ptmkit's ALBERT uses absolute positions")
    pad = hf_cfg.pad_token_id if hf_cfg.pad_token_id is not None else 0
    E = hf_cfg.embedding_size
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.hidden_size,
        num_layers=L,
        num_heads=hf_cfg.num_attention_heads,
        intermediate_size=hf_cfg.intermediate_size,
        max_position=hf_cfg.max_position_embeddings,
        type_vocab_size=hf_cfg.type_vocab_size,
        norm="post",
        activation=activation_from_hf(hf_cfg.hidden_act, "ALBERT"),
        layer_norm_eps=float(hf_cfg.layer_norm_eps),
        dropout=float(hf_cfg.hidden_dropout_prob),
        attention_dropout=float(hf_cfg.attention_probs_dropout_prob),
        embedding_norm=True,
        pooler=pooler,
        init_std=float(hf_cfg.initializer_range),
        pad_token_id=int(pad),
        embedding_size=E if project else None,
        sharing="all" if groups == 1 and L > 1 else "none",
    )


# -- key map -------------------------------------------------------------------------------------
def _pairs(cfg: TransformerConfig) -> list[tuple[str, str]]:
    """(ptmkit key, HF key) for every tensor copied one-to-one (everything but q/k/v and the mapping)."""
    pairs = [(f"backbone.embeddings.{n}.weight", f"albert.embeddings.{n}.weight")
             for n in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    pairs += [(f"backbone.embeddings.norm.{p}", f"albert.embeddings.LayerNorm.{p}") for p in _WB]
    for g in range(n_groups(cfg)):
        ours, theirs = f"backbone.layers.{g}", f"albert.encoder.albert_layer_groups.{g}.albert_layers.0"
        for a, b in (("attn.out", "attention.dense"), ("attn_norm", "attention.LayerNorm"), ("ffn.fc1", "ffn"),
                     ("ffn.fc2", "ffn_output"), ("ffn_norm", "full_layer_layer_norm")):
            pairs += [(f"{ours}.{a}.{p}", f"{theirs}.{b}.{p}") for p in _WB]
    pairs += [(f"backbone.pooler.dense.{p}", f"albert.pooler.{p}") for p in _WB]
    pairs += [(f"objective.mlm_head.dense.{p}", f"predictions.dense.{p}") for p in _WB]
    pairs += [(f"objective.mlm_head.norm.{p}", f"predictions.LayerNorm.{p}") for p in _WB]
    pairs += [("objective.mlm_head.bias", "predictions.bias")]
    pairs += [(f"objective.sop_head.{p}", f"sop_classifier.classifier.{p}") for p in _WB]
    return pairs


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``AlbertForPreTraining`` keys (``albert.*``, ``predictions.*``,
    ``sop_classifier.*``), the tensors present in ``state``; the tied decoder weight is left out."""
    out = {hf: state[ours].detach().clone() for ours, hf in _pairs(cfg) if ours in state}
    for g in range(n_groups(cfg)):
        ours, theirs = f"backbone.layers.{g}.attn.qkv", f"albert.encoder.albert_layer_groups.{g}.albert_layers.0.attention"
        for p in _WB:
            q, k, v = state[f"{ours}.{p}"].detach().chunk(3, dim=0)
            out[f"{theirs}.query.{p}"], out[f"{theirs}.key.{p}"], out[f"{theirs}.value.{p}"] = q.clone(), k.clone(), v.clone()
    if "backbone.embeddings.project.weight" in state:
        for p in _WB:
            out[f"{_MAPPING}.{p}"] = state[f"backbone.embeddings.project.{p}"].detach().clone()
    else:  # E = H: HF's mapping is the identity
        out[f"{_MAPPING}.weight"] = torch.eye(cfg.hidden_size)
        out[f"{_MAPPING}.bias"] = torch.zeros(cfg.hidden_size)
    if cfg.type_vocab_size == 0:
        out["albert.embeddings.token_type_embeddings.weight"] = torch.zeros(1, cfg.embedding_dim)
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF ALBERT keys (as present) -> PretrainModel keys; with ``sharing=all`` every layer's keys
    name the one shared group (the module is shared, so they load the same tensors)."""
    out = {ours: hf[key].detach().clone().float() for ours, key in _pairs(cfg) if key in hf}
    for g in range(n_groups(cfg)):
        theirs = f"albert.encoder.albert_layer_groups.{g}.albert_layers.0.attention"
        for p in _WB:
            parts = [hf[f"{theirs}.{n}.{p}"].detach().float() for n in ("query", "key", "value")]
            out[f"backbone.layers.{g}.attn.qkv.{p}"] = torch.cat(parts, dim=0)
    if cfg.embedding_size is not None:
        for p in _WB:
            out[f"backbone.embeddings.project.{p}"] = hf[f"{_MAPPING}.{p}"].detach().clone().float()
    if cfg.sharing == "all":
        shared = {k[len("backbone.layers.0.") :]: v for k, v in out.items() if k.startswith("backbone.layers.0.")}
        for i in range(1, cfg.num_layers):
            out.update({f"backbone.layers.{i}.{k}": v for k, v in shared.items()})
    return out


def _with_albert_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``AlbertModel`` keys have no ``albert.`` prefix; add it so one key map serves all classes."""
    heads = ("albert.", "predictions.", "sop_classifier.")
    return {(k if k.startswith(heads) else f"albert.{k}"): v for k, v in state.items()}


# -- export --------------------------------------------------------------------------------------
def build_hf_albert(pretrained: Any, with_heads: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """An HF ALBERT model (eval mode) with ``pretrained``'s weights, and the state dict to save:
    ``AlbertForPreTraining`` with MLM and SOP heads (and a pooler), ``AlbertForMaskedLM`` with an
    MLM head only, else ``AlbertModel``."""
    AlbertForMaskedLM, AlbertForPreTraining, AlbertModel = hf("AlbertForMaskedLM"), hf("AlbertForPreTraining"), hf("AlbertModel")

    cfg: TransformerConfig = pretrained.backbone.config
    hf_cfg = to_hf_config(cfg, pretrained.causal)
    heads = export_heads(pretrained) if with_heads else ()
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    if "mlm" in heads:
        state.update({f"objective.{k}": v for k, v in pretrained.objective.state_dict().items()
                      if k.startswith(("mlm_head.", "sop_head."))})
    hf_state = state_dict_to_hf(state, cfg)
    has_sop = "sop_classifier.classifier.weight" in hf_state and cfg.pooler
    if "sop_classifier.classifier.weight" in hf_state and not cfg.pooler:
        log.warning("the SOP head reads h[CLS] without a pooler, which HF ALBERT cannot express; it is not exported")
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("sop_classifier.")}
    if has_sop:
        model = AlbertForPreTraining(hf_cfg)
    elif "predictions.bias" in hf_state:
        model = AlbertForMaskedLM(hf_cfg)
    else:
        model = AlbertModel(hf_cfg, add_pooling_layer=cfg.pooler)
        hf_state = {k[len("albert.") :]: v for k, v in hf_state.items() if k.startswith("albert.")}
    own = model.state_dict()
    missing = set(own) - set(hf_state) - {"predictions.decoder.weight", "predictions.decoder.bias"}
    if missing:
        raise PtmError(f"cannot export: the model has no weights for {sorted(missing)[:4]}")
    model.load_state_dict({k: v for k, v in hf_state.items() if k in own}, strict=False)
    model.tie_weights()
    model.eval()
    return model, hf_state


def export_albert(pretrained: Any, out_dir: str | Path, with_heads: bool = True) -> Path:
    """Write ``pretrained`` as an HF ALBERT directory (``AlbertModel``, ``AlbertForMaskedLM`` or
    ``AlbertForPreTraining`` load it with ``from_pretrained``)."""
    model, hf_state = build_hf_albert(pretrained, with_heads)
    return write_hf_dir(model, pretrained, out_dir, state_dict=hf_state)


# -- fine-tuned task models -----------------------------------------------------------------------
TASK_CLASSES = {
    "sequence_classification": "AlbertForSequenceClassification",
    "token_classification": "AlbertForTokenClassification",
    "question_answering": "AlbertForQuestionAnswering",
}


def build_hf_albert_task(pretrained: Any, head: TaskHead) -> Any:
    """An HF ``AlbertFor...`` task model (eval mode) holding ``pretrained``'s encoder and ``head``."""
    cfg: TransformerConfig = pretrained.backbone.config
    state = state_dict_to_hf({f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}, cfg)
    state.update(head.tensors("qa_outputs" if head.kind == "question_answering" else "classifier"))
    return task_model(TASK_CLASSES[head.kind], to_hf_config(cfg, pretrained.causal), head, state)


# -- import --------------------------------------------------------------------------------------
def import_albert(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF ALBERT directory or model -> ``(TransformerConfig, PretrainModel state dict, tokenizer)``
    with the MLM head (``objective.mlm_head.*``) and SOP head (``objective.sop_head.*``) when present."""
    AlbertForPreTraining = hf("AlbertForPreTraining")

    hf_model, present, tokenizer, hf_dir = read_hf(AlbertForPreTraining, hf_dir_or_model, tokenizer)
    hf_state = _with_albert_prefix(present)
    hf_cfg = hf_model.config
    mapping = hf_state[f"{_MAPPING}.weight"]
    identity = (hf_cfg.embedding_size == hf_cfg.hidden_size and torch.equal(mapping, torch.eye(hf_cfg.hidden_size))
                and not hf_state[f"{_MAPPING}.bias"].any())
    if hf_cfg.embedding_size == hf_cfg.hidden_size and not identity:
        raise PtmError(
            f"the checkpoint maps its embeddings E -> H with a learned {hf_cfg.hidden_size} x {hf_cfg.hidden_size} "
            f"matrix; ptmkit projects only factorized embeddings (E < H), so it cannot import this model"
        )
    cfg = from_hf_config(hf_cfg, pooler="albert.pooler.weight" in hf_state, project=not identity)
    check_tied(hf_state.get("predictions.decoder.weight"), hf_state["albert.embeddings.word_embeddings.weight"], "MLM decoder")
    head = ("predictions.dense.weight", "predictions.LayerNorm.weight", "predictions.bias")
    if not all(k in hf_state for k in head):  # a partial head is no head
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("predictions.")}
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def load_hf_albert(hf_dir: str | Path) -> Any:
    """Import an HF ALBERT directory as a ready ``Pretrained`` (backbone + ``albert`` objective;
    SOP only with segment embeddings and a pooler, as the checkpoint has them)."""
    cfg, state, tokenizer = import_albert(hf_dir)
    sop = "objective.sop_head.weight" in state and cfg.type_vocab_size >= 2
    if not sop:
        state = {k: v for k, v in state.items() if not k.startswith("objective.sop_head.")}
    section = {"name": "albert", **to_dict(ALBERTConfig(sop=sop))}
    return assemble(cfg, section, state, tokenizer, source=str(hf_dir))


@register("hf_family", "albert")
class AlbertFamily(HFFamily):
    """Post-LN Transformers with factorized embeddings and/or all layers shared <->
    ``AlbertModel`` / ``AlbertForMaskedLM`` / ``AlbertForPreTraining``."""

    formats = ("albert", "albert-pretraining")
    model_types = ("albert",)

    def format_for(self, pretrained: Any) -> str | None:
        cfg = pretrained.backbone.config
        if problems(cfg, pretrained.causal):
            return None
        albert_like = cfg.embedding_size is not None or cfg.sharing == "all"
        objective = (pretrained.config.get("objective") or {}).get("name")
        if not albert_like and objective != "albert":
            return None  # a plain BERT is BERT's to export
        return "albert-pretraining" if "mlm" in export_heads(pretrained) else "albert"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        if format == "albert-pretraining" and "mlm" not in export_heads(pretrained):
            raise PtmError("--format albert-pretraining needs a model trained with an MLM objective; use --format albert")
        return export_albert(pretrained, out_dir, with_heads=format == "albert-pretraining")

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_albert(hf_dir)

    task_classes = TASK_CLASSES

    def task_problems(self, pretrained: Any, head: TaskHead) -> list[str]:
        return problems(pretrained.backbone.config, pretrained.causal)

    def export_task(self, pretrained: Any, head: TaskHead, out_dir: str | Path) -> Path:
        return write_hf_dir(build_hf_albert_task(pretrained, head), pretrained, out_dir)
