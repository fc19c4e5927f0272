"""RoBERTa <-> HF transformers (``RobertaModel``, ``RobertaForMaskedLM``).

RoBERTa's encoder is BERT's, so the key map is BERT's (:mod:`ptmkit.interop.hf_bert`) with the
prefixes renamed::

    bert.*                                   roberta.*
    cls.predictions.transform.dense          lm_head.dense
    cls.predictions.transform.LayerNorm      lm_head.layer_norm
    cls.predictions.bias                     lm_head.bias (= lm_head.decoder.bias)
    (tied to word_embeddings)                lm_head.decoder.weight

Two things differ in the computation:

* **Positions.** HF RoBERTa numbers the non-padding tokens from ``pad_token_id + 1`` (fairseq's
  convention) and gives padding the row ``pad_token_id``; ptmkit numbers from 0.  For a
  right-padded sequence, HF position ``pad + 1 + t`` is ptmkit position ``t``, so the HF table is
  ptmkit's ``[P, H]`` table under ``pad + 1`` zero rows: ``max_position_embeddings = P + pad + 1``
  (514 for RoBERTa's ``pad = 1`` and 512 positions).  Import drops those rows.
* **The LM head** always applies the exact (erf) GELU, whatever ``hidden_act`` says; a model whose
  activation is another one exports without its MLM head.

``type_vocab_size`` is 1 in RoBERTa (one segment); a model without segment embeddings exports one
all-zero row.  RoBERTa has no NSP head; a pooler, which ``RobertaForMaskedLM`` lacks, is kept in
the exported files and read back on import.

A fine-tuned task model exports its encoder by this map and its linear head as
``RobertaForSequenceClassification`` (whose head, ``tanh(dense(h[<s>]))`` then ``out_proj``, is
BERT's pooler and classifier: ``backbone.pooler.dense`` -> ``classifier.dense``, the classifier ->
``classifier.out_proj``), ``RobertaForTokenClassification`` (``classifier``) or
``RobertaForQuestionAnswering`` (``qa_outputs``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ptmkit.config import to_dict
from ptmkit.encoders.transformer import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.interop import hf_bert
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
from ptmkit.objectives.roberta import RoBERTaConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

# BERT key prefix -> RoBERTa key prefix (longest first, so the head's names win over "bert.").
_RENAME = (
    ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
    ("cls.predictions.transform.dense.", "lm_head.dense."),
    ("cls.predictions.bias", "lm_head.bias"),
    ("bert.", "roberta."),
)
_POSITIONS = "roberta.embeddings.position_embeddings.weight"


def _rename(key: str, forward: bool) -> str | None:
    for bert, roberta in _RENAME:
        src, dst = (bert, roberta) if forward else (roberta, bert)
        if key.startswith(src):
            return dst + key[len(src) :]
    return None


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = False) -> list[str]:
    """What keeps a model from being a RoBERTa (BERT's conditions; empty when it is one)."""
    return [p.replace("BERT", "RoBERTa").replace("--format bert", "--format roberta") for p in hf_bert.problems(model_cfg, causal)]


def to_hf_config(model_cfg: TransformerConfig, tokenizer: Any = None) -> Any:
    """``TransformerConfig`` -> ``transformers.RobertaConfig`` (positions offset by ``pad + 1``)."""
    RobertaConfig = hf("RobertaConfig")

    found = problems(model_cfg)
    if found:
        raise PtmError("this model cannot be exported as RoBERTa: " + "; ".join(found))
    pad = model_cfg.pad_token_id
    special = {}
    if tokenizer is not None:  # <s> and </s> are [CLS] and [SEP] in ptmkit's vocabularies
        special = dict(bos_token_id=int(tokenizer.cls_id), eos_token_id=int(tokenizer.sep_id))
    return RobertaConfig(
        vocab_size=model_cfg.vocab_size,
        hidden_size=model_cfg.hidden_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        intermediate_size=model_cfg.intermediate_size,
        hidden_act=ACT_TO_HF[model_cfg.activation],
        hidden_dropout_prob=model_cfg.dropout,
        attention_probs_dropout_prob=model_cfg.attention_dropout,
        max_position_embeddings=model_cfg.max_position + pad + 1,
        type_vocab_size=max(model_cfg.type_vocab_size, 1),
        initializer_range=model_cfg.init_std,
        layer_norm_eps=model_cfg.layer_norm_eps,
        pad_token_id=pad,
        tie_word_embeddings=True,
        **special,
    )


def from_hf_config(hf_cfg: Any, pooler: bool) -> TransformerConfig:
    """``transformers.RobertaConfig`` -> ``TransformerConfig`` (``max_position = rows - pad - 1``)."""
    if getattr(hf_cfg, "model_type", "roberta") != "roberta":
        raise PtmError(f"expected a RoBERTa checkpoint (model_type 'roberta'), got model_type {hf_cfg.model_type!r}")
    if getattr(hf_cfg, "is_decoder", False) or getattr(hf_cfg, "add_cross_attention", False):
        raise PtmError("RoBERTa decoders (is_decoder / add_cross_attention) are not supported; import an encoder")
    pad = int(hf_cfg.pad_token_id if hf_cfg.pad_token_id is not None else 1)
    positions = hf_cfg.max_position_embeddings - pad - 1
    if positions < 1:
        raise PtmError(f"max_position_embeddings={hf_cfg.max_position_embeddings} leaves no positions after pad_token_id={pad}")
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.hidden_size,
        num_layers=hf_cfg.num_hidden_layers,
        num_heads=hf_cfg.num_attention_heads,
        intermediate_size=hf_cfg.intermediate_size,
        max_position=positions,
        type_vocab_size=hf_cfg.type_vocab_size,
        norm="post",
        activation=activation_from_hf(hf_cfg.hidden_act, "RoBERTa"),
        layer_norm_eps=float(hf_cfg.layer_norm_eps),
        dropout=float(hf_cfg.hidden_dropout_prob),
        attention_dropout=float(hf_cfg.attention_probs_dropout_prob),
        embedding_norm=True,
        pooler=pooler,
        init_std=float(hf_cfg.initializer_range),
        pad_token_id=pad,
    )


# -- key map -------------------------------------------------------------------------------------
def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """PretrainModel state dict -> ``RobertaForMaskedLM`` keys (``roberta.*``, ``lm_head.*``); the
    tied decoder weight is left out (HF ties it on load); the NSP head has no RoBERTa place."""
    bert = hf_bert.state_dict_to_hf(state, cfg)
    out = {}
    for key, value in bert.items():
        new = _rename(key, forward=True)
        if new is not None:
            out[new] = value
    table = out[_POSITIONS]
    out[_POSITIONS] = torch.cat([table.new_zeros(cfg.pad_token_id + 1, table.shape[1]), table])
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """``roberta.*`` / ``lm_head.*`` keys (as present) -> PretrainModel keys."""
    bert = {}
    for key, value in hf.items():
        new = _rename(key, forward=False)
        if new is not None:
            bert[new] = value
    bert["bert.embeddings.position_embeddings.weight"] = hf[_POSITIONS][cfg.pad_token_id + 1 :]
    return hf_bert.state_dict_from_hf(bert, cfg)


# -- export --------------------------------------------------------------------------------------
def build_hf_roberta(pretrained: Any, with_heads: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """An HF RoBERTa model (eval mode) holding ``pretrained``'s weights, and the state dict to save:
    ``RobertaForMaskedLM`` with an MLM head, else ``RobertaModel``."""
    RobertaForMaskedLM, RobertaModel = hf("RobertaForMaskedLM"), hf("RobertaModel")

    cfg: TransformerConfig = pretrained.backbone.config
    if pretrained.causal:
        raise PtmError("this model cannot be exported as RoBERTa: its objective reads left to right")
    hf_cfg = to_hf_config(cfg, pretrained.tokenizer)
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    if with_heads and "mlm" in export_heads(pretrained):
        if cfg.activation != "gelu":
            log.warning("RoBERTa's LM head applies the exact GELU, not %s; the MLM head is not exported", cfg.activation)
        else:
            state.update({f"objective.{k}": v for k, v in pretrained.objective.mlm_head.state_dict(prefix="mlm_head.").items()})
    hf_state = state_dict_to_hf(state, cfg)
    if "lm_head.bias" in hf_state:
        model = RobertaForMaskedLM(hf_cfg)
    else:
        model = RobertaModel(hf_cfg, add_pooling_layer=cfg.pooler)
        hf_state = {k[len("roberta.") :]: v for k, v in hf_state.items()}
    own = model.state_dict()
    missing = set(own) - set(hf_state) - {"lm_head.decoder.weight", "lm_head.decoder.bias"}
    if missing:
        raise PtmError(f"cannot export: the model has no weights for {sorted(missing)[:4]}")
    model.load_state_dict({k: v for k, v in hf_state.items() if k in own}, strict=False)
    model.tie_weights()
    model.eval()
    return model, hf_state


def export_roberta(pretrained: Any, out_dir: str | Path, with_heads: bool = True) -> Path:
    """Write ``pretrained`` as an HF RoBERTa directory that ``RobertaForMaskedLM`` (with an MLM
    head) or ``RobertaModel`` load with ``from_pretrained``."""
    model, hf_state = build_hf_roberta(pretrained, with_heads)
    return write_hf_dir(model, pretrained, out_dir, state_dict=hf_state)


# -- fine-tuned task models -----------------------------------------------------------------------
TASK_CLASSES = {
    "sequence_classification": "RobertaForSequenceClassification",
    "token_classification": "RobertaForTokenClassification",
    "question_answering": "RobertaForQuestionAnswering",
}


def build_hf_roberta_task(pretrained: Any, head: TaskHead) -> Any:
    """An HF ``RobertaFor...`` task model (eval mode) holding ``pretrained``'s encoder and ``head``."""
    cfg: TransformerConfig = pretrained.backbone.config
    state = state_dict_to_hf({f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}, cfg)
    if head.kind == "sequence_classification":  # the pooler is the first layer of RoBERTa's classification head
        for p in ("weight", "bias"):
            state[f"classifier.dense.{p}"] = state.pop(f"roberta.pooler.dense.{p}")
        state.update(head.tensors("classifier.out_proj"))
    else:
        state.update(head.tensors("qa_outputs" if head.kind == "question_answering" else "classifier"))
    return task_model(TASK_CLASSES[head.kind], to_hf_config(cfg, pretrained.tokenizer), head, state)


# -- import --------------------------------------------------------------------------------------
def _saved_pooler(hf_dir: Path) -> dict[str, torch.Tensor]:
    """The pooler tensors in the directory's safetensors files (``RobertaForMaskedLM`` drops them)."""
    out = {}
    for path in sorted(hf_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key.endswith(("pooler.dense.weight", "pooler.dense.bias")):
                    out["roberta.pooler.dense." + key.rsplit(".", 1)[1]] = f.get_tensor(key).float()
    return out


def import_roberta(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF RoBERTa directory or model -> ``(TransformerConfig, PretrainModel state dict, tokenizer)``
    (``objective.mlm_head.*`` when the checkpoint has an LM head)."""
    RobertaForMaskedLM = hf("RobertaForMaskedLM")

    hf_model, present, tokenizer, hf_dir = read_hf(RobertaForMaskedLM, hf_dir_or_model, tokenizer)
    if hf_dir is not None:
        present.update(_saved_pooler(hf_dir))
    hf_state = {(k if k.startswith(("roberta.", "lm_head.")) else f"roberta.{k}"): v for k, v in present.items()}
    cfg = from_hf_config(hf_model.config, pooler="roberta.pooler.dense.weight" in hf_state)
    check_tied(hf_state.get("lm_head.decoder.weight"), hf_state["roberta.embeddings.word_embeddings.weight"], "LM decoder")
    head = ("lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.bias")
    if not all(k in hf_state for k in head):  # a partial head is no head
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("lm_head.")}
    elif cfg.activation != "gelu":
        log.warning("the checkpoint's LM head uses the exact GELU but its encoder %s; the head is not imported", cfg.activation)
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("lm_head.")}
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def load_hf_roberta(hf_dir: str | Path) -> Any:
    """Import an HF RoBERTa directory as a ready ``Pretrained`` (backbone + ``roberta`` objective)."""
    cfg, state, tokenizer = import_roberta(hf_dir)
    return assemble(cfg, {"name": "roberta", **to_dict(RoBERTaConfig())}, state, tokenizer, source=str(hf_dir))


@register("hf_family", "roberta")
class RobertaFamily(HFFamily):
    """Post-LN bidirectional Transformers <-> ``RobertaModel`` / ``RobertaForMaskedLM``.  Chosen by
    default for models of the ``roberta`` objective (``Objective.hf_family``)."""

    formats = ("roberta", "roberta-mlm")
    model_types = ("roberta",)

    def format_for(self, pretrained: Any) -> str | None:
        if problems(pretrained.backbone.config, pretrained.causal):
            return None
        return "roberta-mlm" if "mlm" in export_heads(pretrained) else "roberta"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        if format == "roberta-mlm" and "mlm" not in export_heads(pretrained):
            raise PtmError("--format roberta-mlm needs a model trained with an MLM objective; use --format roberta for the encoder")
        return export_roberta(pretrained, out_dir, with_heads=format == "roberta-mlm")

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_roberta(hf_dir)

    task_classes = TASK_CLASSES

    def task_problems(self, pretrained: Any, head: TaskHead) -> list[str]:
        return problems(pretrained.backbone.config, pretrained.causal)

    def export_task(self, pretrained: Any, head: TaskHead, out_dir: str | Path) -> Path:
        return write_hf_dir(build_hf_roberta_task(pretrained, head), pretrained, out_dir)
