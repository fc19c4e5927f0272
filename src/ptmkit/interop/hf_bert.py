"""BERT <-> HF transformers (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``).

The key map (ptmkit name on the left, HF on the right, ``L`` = ``bert.encoder.layer.{i}``)::

    backbone.embeddings.word_embeddings         bert.embeddings.word_embeddings
    backbone.embeddings.position_embeddings     bert.embeddings.position_embeddings
    backbone.embeddings.token_type_embeddings   bert.embeddings.token_type_embeddings
    backbone.embeddings.norm                    bert.embeddings.LayerNorm
    backbone.layers.{i}.attn.qkv [3H, H]        L.attention.self.{query,key,value} (3 x [H, H], stacked)
    backbone.layers.{i}.attn.out                L.attention.output.dense
    backbone.layers.{i}.attn_norm               L.attention.output.LayerNorm
    backbone.layers.{i}.ffn.fc1                 L.intermediate.dense
    backbone.layers.{i}.ffn.fc2                 L.output.dense
    backbone.layers.{i}.ffn_norm                L.output.LayerNorm
    backbone.pooler.dense                       bert.pooler.dense
    objective.mlm_head.dense                    cls.predictions.transform.dense
    objective.mlm_head.norm                     cls.predictions.transform.LayerNorm
    objective.mlm_head.bias [V]                 cls.predictions.bias (= cls.predictions.decoder.bias)
    (tied to word_embeddings)                   cls.predictions.decoder.weight
    objective.nsp_head                          cls.seq_relationship

Both are post-LN encoders with exact (erf) GELU and LayerNorm eps 1e-12 by default; the
activation and eps are carried over from the config, so any post-LN ptmkit encoder exports.

A fine-tuned task model (:mod:`ptmkit.interop.task_export`) exports its encoder by the same map
and its linear head as ``classifier`` (``BertForSequenceClassification`` over the pooler,
``BertForTokenClassification``) or ``qa_outputs`` (``BertForQuestionAnswering``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
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
from ptmkit.objectives.mlm import MLMConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

_WB = ("weight", "bias")  # the two tensors of a Linear or LayerNorm


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = False) -> list[str]:
    """What keeps a model from being a BERT (empty when it is one)."""
    if not isinstance(model_cfg, TransformerConfig):
        return [f"its encoder is not a Transformer ({type(model_cfg).__name__})"]
    out = []
    if model_cfg.norm != "post":
        out.append(f"norm={model_cfg.norm!r} (BERT is post-LN)")
    if causal:
        out.append("its objective reads left to right (BERT attends in both directions)")
    if model_cfg.positions != "absolute" or model_cfg.embedding_size is not None or model_cfg.sharing != "none":
        out.append("relative positions, factorized embeddings or shared layers (not part of BERT)")
    if not model_cfg.embedding_norm:
        out.append("embedding_norm=false (BERT always normalises the embedding sum)")
    if model_cfg.llama_options():
        out.append(f"{', '.join(model_cfg.llama_options())} (not part of BERT)")
    return out


def to_hf_config(model_cfg: TransformerConfig, causal: bool = False) -> Any:
    """``TransformerConfig`` -> ``transformers.BertConfig``; :class:`PtmError` if BERT cannot express it."""
    BertConfig = hf("BertConfig")

    found = problems(model_cfg, causal)
    if found:
        raise PtmError("this model cannot be exported as BERT: " + "; ".join(found))
    return BertConfig(
        vocab_size=model_cfg.vocab_size,
        hidden_size=model_cfg.hidden_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        intermediate_size=model_cfg.intermediate_size,
        hidden_act=ACT_TO_HF[model_cfg.activation],
        hidden_dropout_prob=model_cfg.dropout,
        attention_probs_dropout_prob=model_cfg.attention_dropout,
        max_position_embeddings=model_cfg.max_position,
        # HF always adds a segment embedding; a model without segments exports one all-zero row.
        type_vocab_size=max(model_cfg.type_vocab_size, 1),
        initializer_range=model_cfg.init_std,
        layer_norm_eps=model_cfg.layer_norm_eps,
        pad_token_id=model_cfg.pad_token_id,
        tie_word_embeddings=True,
    )


def from_hf_config(hf_cfg: Any, pooler: bool = True) -> TransformerConfig:
    """``transformers.BertConfig`` -> ``TransformerConfig``; :class:`PtmError` for what ptmkit lacks."""
    if getattr(hf_cfg, "model_type", "bert") != "bert":
        raise PtmError(f"expected a BERT checkpoint (model_type 'bert'), got model_type {hf_cfg.model_type!r}")
    pos = getattr(hf_cfg, "position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise PtmError(f"position_embedding_type={pos!r} is not supported; ptmkit's BERT uses absolute positions")
    if getattr(hf_cfg, "is_decoder", False) or getattr(hf_cfg, "add_cross_attention", False):
        raise PtmError("BERT decoders (is_decoder / add_cross_attention) are not supported; import an encoder")
    pad = hf_cfg.pad_token_id if hf_cfg.pad_token_id is not None else 0
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.hidden_size,
        num_layers=hf_cfg.num_hidden_layers,
        num_heads=hf_cfg.num_attention_heads,
        intermediate_size=hf_cfg.intermediate_size,
        max_position=hf_cfg.max_position_embeddings,
        type_vocab_size=hf_cfg.type_vocab_size,
        norm="post",
        activation=activation_from_hf(hf_cfg.hidden_act, "BERT"),
        layer_norm_eps=float(hf_cfg.layer_norm_eps),
        dropout=float(hf_cfg.hidden_dropout_prob),
        attention_dropout=float(hf_cfg.attention_probs_dropout_prob),
        embedding_norm=True,
        pooler=pooler,
        init_std=float(hf_cfg.initializer_range),
        scaled_residual_init=False,
        pad_token_id=int(pad),
    )


# -- key map -------------------------------------------------------------------------------------
def _pairs(cfg: TransformerConfig) -> list[tuple[str, str]]:
    """(ptmkit key, HF key) for every tensor copied one-to-one (everything but q/k/v)."""
    pairs = [
        ("backbone.embeddings.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"),
        ("backbone.embeddings.position_embeddings.weight", "bert.embeddings.position_embeddings.weight"),
        ("backbone.embeddings.token_type_embeddings.weight", "bert.embeddings.token_type_embeddings.weight"),
    ]
    pairs += [(f"backbone.embeddings.norm.{p}", f"bert.embeddings.LayerNorm.{p}") for p in _WB]
    for i in range(cfg.num_layers):
        ours, theirs = f"backbone.layers.{i}", f"bert.encoder.layer.{i}"
        for a, b in (
            ("attn.out", "attention.output.dense"),
            ("attn_norm", "attention.output.LayerNorm"),
            ("ffn.fc1", "intermediate.dense"),
            ("ffn.fc2", "output.dense"),
            ("ffn_norm", "output.LayerNorm"),
        ):
            pairs += [(f"{ours}.{a}.{p}", f"{theirs}.{b}.{p}") for p in _WB]
    pairs += [(f"backbone.pooler.dense.{p}", f"bert.pooler.dense.{p}") for p in _WB]
    pairs += [(f"objective.mlm_head.dense.{p}", f"cls.predictions.transform.dense.{p}") for p in _WB]
    pairs += [(f"objective.mlm_head.norm.{p}", f"cls.predictions.transform.LayerNorm.{p}") for p in _WB]
    pairs += [("objective.mlm_head.bias", "cls.predictions.bias")]
    pairs += [(f"objective.nsp_head.{p}", f"cls.seq_relationship.{p}") for p in _WB]
    return pairs


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``BertForPreTraining``-style keys (``bert.*``, ``cls.*``).

    Only tensors present in ``state`` are mapped; the tied decoder weight is left out (HF ties it
    on load).  A model without segment embeddings gets one all-zero segment row.
    """
    out = {hf: state[ours].detach().clone() for ours, hf in _pairs(cfg) if ours in state}
    for i in range(cfg.num_layers):
        ours, theirs = f"backbone.layers.{i}.attn.qkv", f"bert.encoder.layer.{i}.attention.self"
        for p in _WB:
            q, k, v = state[f"{ours}.{p}"].detach().chunk(3, dim=0)  # [3H, ...] -> 3 x [H, ...]
            out[f"{theirs}.query.{p}"], out[f"{theirs}.key.{p}"], out[f"{theirs}.value.{p}"] = q.clone(), k.clone(), v.clone()
    if cfg.type_vocab_size == 0:
        out["bert.embeddings.token_type_embeddings.weight"] = torch.zeros(1, cfg.hidden_size)
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF BERT state dict (``bert.*`` / ``cls.*`` keys, as present) -> PretrainModel keys."""
    out = {ours: hf[key].detach().clone().float() for ours, key in _pairs(cfg) if key in hf}
    for i in range(cfg.num_layers):
        theirs = f"bert.encoder.layer.{i}.attention.self"
        for p in _WB:
            parts = [hf[f"{theirs}.{n}.{p}"].detach().float() for n in ("query", "key", "value")]
            out[f"backbone.layers.{i}.attn.qkv.{p}"] = torch.cat(parts, dim=0)
    return out


def _with_bert_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``BertModel`` keys have no ``bert.`` prefix; add it so one key map serves all classes."""
    return {(k if k.startswith(("bert.", "cls.")) else f"bert.{k}"): v for k, v in state.items()}


# -- export --------------------------------------------------------------------------------------
def _full_state(pretrained: Any) -> dict[str, torch.Tensor]:
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    # An objective whose heads are not BERT's (ELECTRA: a generator's MLM head) exports the backbone alone.
    if "mlm" in export_heads(pretrained):
        state.update({f"objective.{k}": v for k, v in pretrained.objective.state_dict().items()})
    return state


def build_hf_bert(pretrained: Any, with_heads: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """An HF BERT model (eval mode) holding ``pretrained``'s weights, and the HF state dict to save.

    ``BertForPreTraining`` when the objective has MLM and NSP heads (and the model a pooler),
    ``BertForMaskedLM`` with an MLM head only, else ``BertModel``.  A pooler not held by the
    chosen class is dropped here; :func:`export_bert` keeps it in the saved files.
    """
    BertForMaskedLM, BertForPreTraining, BertModel = hf("BertForMaskedLM"), hf("BertForPreTraining"), hf("BertModel")

    cfg: TransformerConfig = pretrained.backbone.config
    hf_cfg = to_hf_config(cfg, pretrained.causal)
    hf_state = state_dict_to_hf(_full_state(pretrained), cfg)
    has_mlm = with_heads and "cls.predictions.bias" in hf_state
    has_nsp = has_mlm and "cls.seq_relationship.weight" in hf_state and cfg.pooler
    if with_heads and "cls.seq_relationship.weight" in hf_state and not cfg.pooler:
        log.warning("the NSP head reads h[CLS] without a pooler, which HF BERT cannot express; it is not exported")
    if has_nsp:
        model = BertForPreTraining(hf_cfg)
    elif has_mlm:
        model = BertForMaskedLM(hf_cfg)
    else:
        model = BertModel(hf_cfg, add_pooling_layer=cfg.pooler)
        hf_state = {k[len("bert.") :]: v for k, v in hf_state.items() if k.startswith("bert.")}
    own = model.state_dict()
    load = {k: v for k, v in hf_state.items() if k in own}
    missing = set(own) - set(load)
    # Tied decoder weight/bias are filled by tie_weights(); nothing else may be missing.
    missing -= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    if missing:
        raise PtmError(f"cannot export: the model has no weights for {sorted(missing)[:4]}")
    model.load_state_dict(load, strict=False)
    model.tie_weights()
    model.eval()
    return model, hf_state


def export_bert(pretrained: Any, out_dir: str | Path, with_heads: bool = True) -> Path:
    """Write ``pretrained`` as an HF BERT directory (``config.json``, ``model.safetensors``,
    tokenizer files).  ``BertModel``, ``BertForMaskedLM`` (with an MLM head) and
    ``BertForPreTraining`` (with an NSP head too) load it with ``from_pretrained``."""
    model, hf_state = build_hf_bert(pretrained, with_heads)
    return write_hf_dir(model, pretrained, out_dir, state_dict=hf_state)


# -- fine-tuned task models -----------------------------------------------------------------------
TASK_CLASSES = {
    "sequence_classification": "BertForSequenceClassification",  # pooler -> dropout -> classifier
    "token_classification": "BertForTokenClassification",  # every token's state -> dropout -> classifier
    "question_answering": "BertForQuestionAnswering",  # every token's state -> qa_outputs [2, H]
}
TASK_LAYER = {"sequence_classification": "classifier", "token_classification": "classifier",
              "question_answering": "qa_outputs"}


def build_hf_bert_task(pretrained: Any, head: TaskHead) -> Any:
    """An HF ``BertFor...`` task model (eval mode, :data:`TASK_CLASSES`) holding ``pretrained``'s
    encoder (the key map above) and ``head`` as its ``classifier`` / ``qa_outputs``."""
    cfg: TransformerConfig = pretrained.backbone.config
    state = state_dict_to_hf({f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}, cfg)
    state.update(head.tensors(TASK_LAYER[head.kind]))
    return task_model(TASK_CLASSES[head.kind], to_hf_config(cfg, pretrained.causal), head, state)


# -- import --------------------------------------------------------------------------------------
def import_bert(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF BERT directory or model -> ``(TransformerConfig, PretrainModel state dict, tokenizer)``.

    The state dict holds ``backbone.*`` and, when the checkpoint has them, the MLM head
    (``objective.mlm_head.*``) and NSP head (``objective.nsp_head.*``).  The tokenizer is read
    from the directory (``None`` for an in-memory model unless given).
    """
    BertForPreTraining = hf("BertForPreTraining")

    hf_model, present, tokenizer, hf_dir = read_hf(BertForPreTraining, hf_dir_or_model, tokenizer)
    hf_state = _with_bert_prefix(present)
    cfg = from_hf_config(hf_model.config, pooler="bert.pooler.dense.weight" in hf_state)
    check_tied(hf_state.get("cls.predictions.decoder.weight"), hf_state["bert.embeddings.word_embeddings.weight"], "MLM decoder")
    if "cls.predictions.bias" not in hf_state and "cls.predictions.decoder.bias" in hf_state:
        hf_state["cls.predictions.bias"] = hf_state["cls.predictions.decoder.bias"]
    mlm_keys = ("cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.weight", "cls.predictions.bias")
    if not all(k in hf_state for k in mlm_keys):  # a partial head is no head
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("cls.predictions.")}
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def objective_section(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, Any]:
    """The ``objective`` config section that matches the imported heads (MLM, NSP if present)."""
    nsp = "objective.nsp_head.weight" in state and cfg.type_vocab_size >= 2
    return {"name": "mlm", **to_dict(replace(MLMConfig(), nsp=nsp))}


def load_hf_bert(hf_dir: str | Path) -> Any:
    """Import an HF BERT directory as a ready ``Pretrained`` (backbone + MLM objective, eval mode).

    Heads the checkpoint lacks (e.g. a ``BertModel`` directory has no MLM head) keep their fresh
    initialisation and are logged.
    """
    cfg, state, tokenizer = import_bert(hf_dir)
    section = objective_section(state, cfg)
    if not section["nsp"]:  # an NSP head without segment embeddings has no use in ptmkit
        state = {k: v for k, v in state.items() if not k.startswith("objective.nsp_head.")}
    return assemble(cfg, section, state, tokenizer, source=str(hf_dir))


@register("hf_family", "bert")
class BertFamily(HFFamily):
    """Post-LN bidirectional Transformers <-> ``BertModel`` / ``BertForMaskedLM`` / ``BertForPreTraining``."""

    formats = ("bert", "bert-mlm")
    model_types = ("bert",)

    def format_for(self, pretrained: Any) -> str | None:
        if problems(pretrained.backbone.config, pretrained.causal):
            return None
        return "bert-mlm" if "mlm" in export_heads(pretrained) else "bert"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        if format == "bert-mlm" and "mlm" not in export_heads(pretrained):
            raise PtmError("--format bert-mlm needs a model trained with the mlm objective; use --format bert for the encoder")
        return export_bert(pretrained, out_dir, with_heads=format == "bert-mlm")

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_bert(hf_dir)

    task_classes = TASK_CLASSES

    def task_problems(self, pretrained: Any, head: TaskHead) -> list[str]:
        return problems(pretrained.backbone.config, pretrained.causal)

    def export_task(self, pretrained: Any, head: TaskHead, out_dir: str | Path) -> Path:
        return write_hf_dir(build_hf_bert_task(pretrained, head), pretrained, out_dir)
